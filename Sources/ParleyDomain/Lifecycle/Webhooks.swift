public import AuthFlows
package import Conversation
public import Foundation
package import Logging
import ParleyCrypto
import ParleyEncoding
import ServiceLifecycle

/// One webhook endpoint: its URL, the secrets that sign what it is sent (all of them, for a
/// rotation: the receiver accepts any one it knows) and the `webhooks` entries that name it.
public struct WebhookEndpoint: Sendable {
    public let url: String
    package let secrets: [[UInt8]]
    package let subscriptions: [WebhookSubscription]

    /// A webhook URL as logs and the admin API show it: without its query, which may carry a
    /// receiver's token (`https://hooks.example/in?…`).
    package static func display(_ url: String) -> String {
        guard let mark = url.firstIndex(of: "?") else { return url }
        return String(url[..<mark]) + "?…"
    }

    /// Whether an event of `type` about `destination` goes here.
    package func covers(type: String, destination: String?) -> Bool {
        guard let type = LifecycleEventType(rawValue: type) else { return false }
        return subscriptions.contains { $0.covers(type, destination: destination) }
    }

    /// The endpoints of a destinations file's subscriptions, one per URL, with their secrets read
    /// (`env:NAME` from `environment`, `file:/path` from disk); every problem otherwise. One URL
    /// named twice must name the same secrets.
    public static func resolve(
        _ subscriptions: [WebhookSubscription], environment: [String: String], readFile: (String) -> String? = {
            try? String(contentsOfFile: $0, encoding: .utf8)
        }
    ) -> (endpoints: [WebhookEndpoint], problems: [String]) {
        var problems: [String] = []
        var endpoints: [WebhookEndpoint] = []
        var order: [String] = []
        var byURL: [String: [WebhookSubscription]] = [:]
        for subscription in subscriptions {
            if byURL[subscription.url] == nil { order.append(subscription.url) }
            byURL[subscription.url, default: []].append(subscription)
        }
        for url in order {
            let named = byURL[url] ?? []
            let references = Set(named.map(\.secretRef))
            guard references.count == 1, let reference = references.first else {
                problems.append("webhook \(display(url).prefix(200)): listed more than once with different secretRef values")
                continue
            }
            let text: String?
            if reference.hasPrefix("env:") {
                text = environment[String(reference.dropFirst(4))]
            } else {
                text = readFile(String(reference.dropFirst(5)))
            }
            guard let text, !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                problems.append("webhook \(display(url).prefix(200)): secretRef \(reference.prefix(200)) names nothing (unset variable, or no such file)")
                continue
            }
            var secrets: [[UInt8]] = []
            var usable = true
            for word in text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" || $0 == "," }) {
                if let secret = WebhookSignature.secret(String(word)) {
                    secrets.append(secret)
                } else {
                    usable = false
                    problems.append(
                        "webhook \(display(url).prefix(200)): a secret of \(reference.prefix(200)) is not base64 (after an optional whsec_) of at least 24 bytes")
                }
            }
            if usable { endpoints.append(WebhookEndpoint(url: url, secrets: secrets, subscriptions: named)) }
        }
        return (endpoints, problems)
    }
}

/// The Standard Webhooks signature (standardwebhooks.com): `webhook-signature` is `v1,` and the
/// base64 HMAC-SHA256 of `id.timestamp.body`, one such value per secret, separated by spaces.
package enum WebhookSignature {
    /// The key bytes of a secret as written: base64, after an optional `whsec_` (Standard Webhooks'
    /// form; its reference libraries decode an unprefixed secret as base64 too, so Parley does the
    /// same and both ends agree); nil when it is not base64 or shorter than 24 bytes.
    package static func secret(_ text: String) -> [UInt8]? {
        let encoded = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
        guard let key = Base64.decode(encoded), key.count >= 24 else { return nil }
        return key
    }

    package static func signature(id: String, timestamp: Int64, body: [UInt8], secrets: [[UInt8]]) -> String {
        let message = Array("\(id).\(timestamp).".utf8) + body
        return secrets.map { "v1," + Base64.encode(HMACSHA256.authenticate(message, key: $0)) }.joined(separator: " ")
    }
}

/// What an endpoint receives: the event (`LifecycleEventBody`), written as every JSON answer is.
package enum WebhookBody {
    package static func encode(_ event: StoredLifecycleEvent) -> [UInt8] {
        // Strings, dates and ids only: the encoder has nothing it could refuse.
        (try? JSONValueEncoder().encode(LifecycleEventBody(event)).encoded()) ?? Array("{}".utf8)
    }
}

/// A lifecycle event as its webhooks receive it and `GET /admin/v1/events` lists it (there with
/// its deliveries beside): `{"id","type","at","registrationId","destination","user","detail"}`.
package struct LifecycleEventBody: Encodable, Sendable {
    package let id: String
    package let type: String
    package let at: Date
    @Nullable package var registrationId: String?
    @Nullable package var destination: String?
    @Nullable package var user: RegistrationView.UserView?
    package let detail: [String: String]

    package init(_ event: StoredLifecycleEvent) {
        id = event.id.uuidString.lowercased()
        type = event.type
        at = event.at
        registrationId = event.registrationID?.uuidString.lowercased()
        destination = event.destination
        user = event.user.map(RegistrationView.UserView.init)
        detail = event.detail
    }
}

/// Sends lifecycle events to their webhook endpoints, from the outbox (`EventRepository`), on
/// every instance: each pass fans new events out into one delivery per endpoint, then leases the
/// due deliveries (no other instance sends them meanwhile) and sends them, a few at once. A `2xx`
/// answer delivers; anything else is tried again after 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h,
/// 4 h and 8 h (about 16 hours in all, a tenth of each at random), then the delivery has failed
/// and waits for an administrator's redelivery.
package struct WebhookDelivery: Service {
    package let events: any EventRepository
    package let endpoints: [WebhookEndpoint]
    package let transport: any Transport
    package let metrics: Metrics
    package let clock: any WallClock
    package let logger: Logger
    package var interval: Duration = .seconds(1)
    package var retryDelays: [Duration] = WebhookDelivery.defaultRetryDelays

    package static let defaultRetryDelays: [Duration] = [5, 30, 120, 600, 1800, 3600, 7200, 14_400, 28_800].map { .seconds($0) }
    /// Longer than one attempt may take (10 s), so a lease never lapses under a sending instance.
    package static let lease = Duration.seconds(60)
    package static let batch = 16

    package func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var passes = 0
            while !Task.isCancelled {
                await pass()
                // The backlog, now and then: one count for the gauge.
                if passes % 15 == 0, let pending = try? await events.pendingDeliveries() {
                    metrics.set(.webhookPending, [], Double(pending))
                }
                passes += 1
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One pass: fan out, then send what is due; how many attempts it made.
    @discardableResult
    package func pass() async -> Int {
        let endpoints = self.endpoints
        do {
            _ = try await events.fanOut(limit: 100) { type, destination in
                endpoints.filter { $0.covers(type: type, destination: destination) }.map(\.url)
            }
        } catch {
            logger.warning("events could not be fanned out to their webhooks", metadata: ["error": "\(error)"])
            return 0
        }
        guard !endpoints.isEmpty else { return 0 }
        let due: [DueDelivery]
        do {
            due = try await events.claimDue(limit: Self.batch, lease: Self.lease)
        } catch {
            logger.warning("due webhook deliveries could not be read", metadata: ["error": "\(error)"])
            return 0
        }
        await withTaskGroup(of: Void.self) { group in
            for delivery in due {
                group.addTask { await attempt(delivery) }
            }
        }
        return due.count
    }

    private func attempt(_ delivery: DueDelivery) async {
        let id = delivery.event.id.uuidString.lowercased()
        guard let endpoint = endpoints.first(where: { $0.url == delivery.endpoint }) else {
            // The endpoint left the configuration: nothing can sign for it.
            await record(delivery, delivered: false, status: nil, error: "the endpoint is no longer configured", retry: false)
            return
        }
        let body = WebhookBody.encode(delivery.event)
        let timestamp = Int64(clock.now.timeIntervalSince1970)
        var headers: HeaderFields = ["Content-Type": "application/json", "User-Agent": "Parley-Webhooks/1"]
        headers.set("webhook-id", id)
        headers.set("webhook-timestamp", String(timestamp))
        headers.set("webhook-signature", WebhookSignature.signature(id: id, timestamp: timestamp, body: body, secrets: endpoint.secrets))
        let request = UpstreamRequest(
            method: "POST", url: endpoint.url, headers: headers, body: .bytes(body),
            timeouts: Timeouts(connect: .seconds(5), total: .seconds(10), idle: .seconds(10)))
        do {
            let response = try await transport.send(request)
            response.body.discard()
            if (200..<300).contains(response.status) {
                await record(delivery, delivered: true, status: response.status, error: nil, retry: false)
            } else {
                await record(delivery, delivered: false, status: response.status, error: "the endpoint answered \(response.status)", retry: true)
            }
        } catch {
            await record(delivery, delivered: false, status: nil, error: "no answer (\(error))".prefix(300).description, retry: true)
        }
    }

    private func record(_ delivery: DueDelivery, delivered: Bool, status: Int?, error: String?, retry: Bool) async {
        let attempts = delivery.attempts + 1
        var retryAt: Date?
        if !delivered, retry, attempts <= retryDelays.count {
            let delay = retryDelays[attempts - 1].timeInterval
            retryAt = clock.now.addingTimeInterval(delay + delay * Double.random(in: 0...0.1))
        }
        let outcome = delivered ? "delivered" : retryAt == nil ? "failed" : "retry"
        metrics.increment(.webhookDeliveries, [("outcome", outcome)])
        let metadata: Logger.Metadata = [
            "event.id": .string(delivery.event.id.uuidString.lowercased()), "event.type": .string(delivery.event.type),
            "webhook.url": .string(WebhookEndpoint.display(delivery.endpoint)), "webhook.attempt": "\(attempts)", "webhook.outcome": .string(outcome),
        ]
        if delivered {
            logger.info("webhook delivered", metadata: metadata)
        } else {
            logger.warning("webhook not delivered", metadata: metadata.merging(["error": .string(error ?? "")]) { a, _ in a })
        }
        do {
            try await events.recordAttempt(
                eventID: delivery.event.id, endpoint: delivery.endpoint, delivered: delivered, status: status, error: error, retryAt: retryAt)
        } catch {
            // The lease lapses and the delivery is tried again: at least once, never lost.
            logger.warning("a webhook attempt could not be recorded", metadata: metadata.merging(["error": "\(error)"]) { a, _ in a })
        }
    }

    package init(events: any EventRepository, endpoints: [WebhookEndpoint], transport: any Transport, metrics: Metrics, clock: any WallClock, logger: Logger, interval: Duration = .seconds(1), retryDelays: [Duration] = WebhookDelivery.defaultRetryDelays) {
        self.events = events
        self.endpoints = endpoints
        self.transport = transport
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        self.interval = interval
        self.retryDelays = retryDelays
    }
}
