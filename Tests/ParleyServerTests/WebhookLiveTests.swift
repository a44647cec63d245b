import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

import ParleyDomain
@testable import ParleyServer

/// Lifecycle events and signed webhooks, live: two instances of the real server object on one
/// real PostgreSQL, the simulator's authorization server, headless Chromium for the sign-ins, and
/// a receiver that checks every signature with the Standard Webhooks reference library
/// (PyPI `standardwebhooks`, `Tests/Fixtures/lifecycle/webhook_receiver.py`).
@Suite(.serialized) struct WebhookLiveTests {
    static let admin = [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk")]
    /// Parley signs with both (a rotation); the receiver knows only the second.
    static let oldSecret = "whsec_c2VjcmV0LW9mLWxhc3QteWVhci0wMTIzNDU2Nzg5"
    static let newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    /// Every delivery the receiver saw, in arrival order.
    static func received(_ port: Int) async throws -> [[String: Any]] {
        let answer = try await RawHTTP.request(port: port, method: "GET", target: "/received")
        return (try JSONSerialization.jsonObject(with: Data(answer.body)) as? [[String: Any]]) ?? []
    }

    /// Waits (bounded) until `done` holds for the receiver's records; the records.
    static func receivedUntil(
        _ port: Int, timeout: Duration = .seconds(40), _ done: ([[String: Any]]) -> Bool
    ) async throws -> [[String: Any]] {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        while true {
            let records = try await received(port)
            if done(records) || clock.now > deadline { return records }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    static func deliveredTypes(_ records: [[String: Any]]) -> [String] {
        records.filter { $0["answered"] as? Int == 204 }.compactMap { ($0["payload"] as? [String: Any])?["type"] as? String }
    }

    @Test func lifecycleEventsReachASignedWebhookOnceEachWithRetriesAndRedelivery() async throws {
        try ExternalCheck.run("/bin/bash", [packageRoot + "/scripts/peer-python.sh", "webhooks", "-c", "import standardwebhooks"])
        let receiverPort = try FreePort.find()
        let receiver = try await ParleyProcess.start(
            arguments: [
                packageRoot + "/scripts/peer-python.sh", "webhooks", packageRoot + "/Tests/Fixtures/lifecycle/webhook_receiver.py",
                "--port", String(receiverPort), "--secret", Self.newSecret, "--fail-first", "1",
            ], environment: ["HOME": NSTemporaryDirectory()], port: receiverPort, binary: "/bin/bash", readyLine: "webhook-receiver ready")
        defer { Task { await receiver.stop() } }
        let hook = "http://127.0.0.1:\(receiverPort)/hook"
        let logs = LogCapture()
        try await withLiveParley(
            destinations: { [OAuth2IdentityLiveTests.destination($0)] }, options: LiveOptions(instances: 2, logs: logs, fixedPorts: true),
            adjust: { configuration in
                let (endpoints, problems) = WebhookEndpoint.resolve(
                    [WebhookSubscription(url: hook, secretRef: "env:HOOK_SECRETS", events: nil, destination: nil)],
                    environment: ["HOOK_SECRETS": "\(Self.oldSecret) \(Self.newSecret)"])
                precondition(problems.isEmpty)
                configuration.webhooks = endpoints
                configuration.housekeeping.refreshFailedEventAfter = 1
            }
        ) { live in
            let (registration, token) = try await live.register("as", credentials: false)
            // alice signs in: flow.completed. bob signs in on her registration: flow.failed (identity_mismatch).
            let (first, firstURL) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(browser, live: live, flowURL: firstURL, flowID: first, username: "alice", password: "wonderland")
            }
            let (bobFlow, bobURL) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(browser, live: live, flowURL: bobURL, flowID: bobFlow, username: "bob", password: "builder")
            }
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token).status == 200)

            // The authorization server is down for one refresh: token.refresh_failed (after one try, as configured).
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/expire-access-tokens")
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/fail-token?status=503&count=1")
            let down = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token)
            #expect(down.status == 503, "\(down.text)")

            // It forgets the session: the next refresh (once the back-off has passed) is rejected → reconnect_required.
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/revoke-refresh-tokens")
            var refused = down
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .seconds(15))
            while refused.status != 401, clock.now < deadline {
                try await Task.sleep(for: .milliseconds(250))
                refused = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token)
            }
            #expect(refused.status == 401 && refused.json?["code"] as? String == "interaction_required", "\(refused.text)")
            let flowID = try #require((refused.json?["flow"] as? [String: Any])?["id"] as? String)
            let flowURL = try #require((refused.json?["flow"] as? [String: Any])?["url"] as? String)
            // alice again: flow.completed and registration.recovered.
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(browser, live: live, flowURL: flowURL, flowID: flowID, username: "alice", password: "wonderland")
            }
            // An administrator revokes a second registration; the first deletes itself: registration.revoked twice.
            let (second, _) = try await live.register("as", credentials: false)
            var revocation = Self.admin
            revocation.append(("Content-Type", "application/json"))
            let revoked = try await live.request(
                "POST", "/admin/v1/revocations", headers: revocation, body: Array(try JSONSerialization.data(withJSONObject: ["registrationId": second])))
            #expect(revoked.status == 200, "\(revoked.text)")
            #expect(try await live.request("DELETE", "/v1/registrations/me", token: token).status == 204)

            let expected = [
                "flow.completed", "flow.completed", "flow.failed", "registration.reconnect_required", "registration.recovered",
                "registration.revoked", "registration.revoked", "token.refresh_failed",
            ]
            let records = try await Self.receivedUntil(receiverPort) { Self.deliveredTypes($0).count >= expected.count }
            #expect(Self.deliveredTypes(records).sorted() == expected, "\(records)")
            // Every delivery carried a signature the reference library accepts (with the receiver's one secret).
            #expect(records.allSatisfy { $0["verified"] as? Bool == true }, "\(records)")
            #expect(records.allSatisfy { ($0["signature"] as? String)?.split(separator: " ").count == 2 }, "one signature per secret")
            // The first was refused (500) and tried again with the same id; no id was delivered twice.
            let firstRecord = try #require(records.first)
            #expect(firstRecord["answered"] as? Int == 500)
            let delivered = records.filter { $0["answered"] as? Int == 204 }.compactMap { $0["id"] as? String }
            #expect(Set(delivered).count == delivered.count, "never delivered twice: \(delivered)")
            #expect(delivered.contains(firstRecord["id"] as? String ?? "-"), "the refused delivery was retried")

            // The contract's shape, and what each event says.
            let payloads = records.filter { $0["answered"] as? Int == 204 }.compactMap { $0["payload"] as? [String: Any] }
            for payload in payloads {
                #expect(Set(payload.keys) == ["id", "type", "at", "registrationId", "destination", "user", "detail"], "\(payload)")
                #expect(payload["destination"] as? String == "as")
            }
            func payload(_ type: String) -> [String: Any]? { payloads.first { $0["type"] as? String == type } }
            #expect((payload("flow.failed")?["detail"] as? [String: Any])?["reason"] as? String == "identity_mismatch")
            #expect((payload("flow.failed")?["detail"] as? [String: Any])?["flowId"] as? String == bobFlow)
            #expect((payload("registration.reconnect_required")?["detail"] as? [String: Any])?["flowId"] as? String == flowID)
            #expect((payload("registration.recovered")?["user"] as? [String: Any])?["subject"] as? String == "alice")
            #expect(payload("registration.recovered")?["registrationId"] as? String == registration)
            #expect((payload("token.refresh_failed")?["detail"] as? [String: Any])?["outcome"] as? String == "unavailable")
            let revokedBy = payloads.filter { $0["type"] as? String == "registration.revoked" }
                .compactMap { ($0["detail"] as? [String: Any])?["by"] as? String }
            #expect(revokedBy.sorted() == ["admin", "client"])
            // No secret in any event: no token the authorization server issued, no client token, no flow URL.
            let wire = records.map { "\($0["payload"] ?? "")" }.joined()
            for secret in live.simulator.oauth.issuedTokenValues + [token] { #expect(!wire.contains(secret), "a secret in an event") }
            #expect(!wire.contains("k="), "no flow URL")

            // Administrators see each event with its delivery state, filter by type, and redeliver.
            let list = try await live.request("GET", "/admin/v1/events?limit=500", headers: Self.admin)
            #expect(list.status == 200, "\(list.text)")
            let items = try #require(list.json?["items"] as? [[String: Any]])
            #expect(items.count == expected.count, "\(list.text)")
            let retried = try #require(items.first { $0["id"] as? String == firstRecord["id"] as? String })
            let delivery = try #require((retried["deliveries"] as? [[String: Any]])?.first)
            #expect(delivery["endpoint"] as? String == hook)
            #expect(delivery["status"] as? String == "delivered" && delivery["attempts"] as? Int == 2 && delivery["lastStatus"] as? Int == 204)
            let history = try #require(delivery["history"] as? [[String: Any]])
            #expect(history.map { $0["status"] as? Int } == [500, 204], "every attempt is visible: \(history)")
            #expect(history.first?["error"] as? String == "the endpoint answered 500" && history.last?["error"] is NSNull)
            let failures = try await live.request("GET", "/admin/v1/events?type=flow.failed", headers: Self.admin)
            #expect((failures.json?["items"] as? [[String: Any]])?.count == 1)
            #expect(try await live.request("GET", "/admin/v1/events?type=flow.nonsense", headers: Self.admin).status == 400)
            #expect(try await live.request("GET", "/admin/v1/events", headers: []).status == 401)
            let again = try await live.request("POST", "/admin/v1/events/\(firstRecord["id"] as? String ?? "")/redelivery", headers: Self.admin)
            #expect(again.status == 202)
            #expect(try await live.request("POST", "/admin/v1/events/\(UUID())/redelivery", headers: Self.admin).status == 404)
            let after = try await Self.receivedUntil(receiverPort) { Self.deliveredTypes($0).count > expected.count }
            #expect(Self.deliveredTypes(after).count == expected.count + 1, "the redelivery arrived")
            #expect(after.last?["id"] as? String == firstRecord["id"] as? String)

            // The secrets never reach a log line.
            let logText = logs.all.joined(separator: "\n")
            #expect(logText.contains("webhook delivered"))
            for secret in [Self.oldSecret, Self.newSecret, String(Self.newSecret.dropFirst(6))] { #expect(!logText.contains(secret)) }
        }
        await receiver.stop()
    }
}
