import Foundation
import Hummingbird
import Logging
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

/// Traces from the real `parley` binary (docs/operations.md "Traces"): an in-process OTLP/HTTP
/// receiver (JSON) collects what Parley exports, and the span tree of a proxied call that
/// restarts once (a Basic challenge) is checked and printed.
@Suite(.serialized) struct TracesTests {
    @Test func aConversationWithARestartIsOneTraceUnderTheRequest() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withOTLPReceiver { receiverPort, receiver in
            try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
                let sim = "http://127.0.0.1:\(simulatorPort)"
                let path = try ScratchFile.write(
                    """
                    destinations:
                      - name: sim
                        url: \(sim)
                        basic: {}
                        propagateTraceContext: true
                      - name: plain
                        url: \(sim)
                        basic: {}
                      - name: as
                        url: \(sim)
                        oauth2:
                          grant: client_credentials
                          authorizationEndpoint: \(sim)/oauth/authorize
                          tokenEndpoint: \(sim)/oauth/token
                          clientId: parley-confidential
                          clientSecret: s3cret
                          clientAuthentication: client_secret_basic
                          scopes: [read]
                    """, suffix: ".yaml")
                var env = ServeTests.environment(database: database, destinations: path)
                env["PARLEY_OTEL_TRACES"] = "otlp"
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:\(receiverPort)"
                env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
                env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
                let parley = try await ParleyProcess.start(environment: env)
                defer { Task { await parley.stop() } }

                func register(_ destination: String, credentials: Bool = true) async throws -> String {
                    var body = #"{"destination":"\#(destination)""#
                    if credentials { body += #","credentials":{"username":"alice","password":"wonderland"}"# }
                    let created = try await RawHTTP.request(
                        port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
                        body: Array((body + "}").utf8))
                    return try #require(created.json?["clientToken"] as? String, "\(created.status) \(created.text)")
                }
                func get(_ target: String, _ token: String) async throws -> RawHTTPResponse {
                    try await RawHTTP.request(port: parley.port, method: "GET", target: target, headers: [("Authorization", "Bearer \(token)")])
                }

                // A Basic challenge first, then the answer: one restart.
                let token = try await register("sim")
                let data = try await get("/v1/proxy/api/data?secret=q1", token)
                #expect(data.status == 200, "\(data.text)")

                let trace = try await receiver.waitForTrace(timeout: .seconds(20)) { spans in
                    spans.contains { $0.name == "GET /v1/proxy/**" && $0.parent == nil }
                        && spans.filter { $0.name == "upstream exchange" }.count >= 2
                }
                print("span tree of GET /v1/proxy/api/data (Basic challenge, one restart):\n" + SpanRecord.tree(trace))
                try Self.checkBasicTrace(trace)
                // Nothing secret in any attribute: no query, no token, no password, no SQL parameter.
                for span in receiver.spans {
                    for (key, value) in span.attributes {
                        for secret in ["q1", token, "wonderland", "s3cret", "secret="] {
                            #expect(!value.contains(secret), "\(span.name) \(key) carries a secret")
                        }
                    }
                }

                // W3C trace context reaches the upstream only where the destination allows it.
                let echoed = try await get("/v1/proxy/echo/t", token)
                let headers = try #require(echoed.json?["headers"] as? [String: Any])
                let traceparent = try #require((headers["traceparent"] as? [String])?.first, "sim allows trace context")
                let echoTrace = try await receiver.waitForTrace(timeout: .seconds(20)) { spans in
                    spans.contains { $0.name == "upstream exchange" && traceparent.contains(SpanRecord.hex($0.id)) }
                }
                #expect(traceparent.hasPrefix("00-" + SpanRecord.hex(echoTrace[0].trace) + "-"), "\(traceparent)")
                let plainToken = try await register("plain")
                let plain = try await get("/v1/proxy/echo/t", plainToken)
                let plainHeaders = try #require(plain.json?["headers"] as? [String: Any])
                #expect(plainHeaders["traceparent"] == nil, "plain does not allow trace context")
                #expect(plainHeaders["tracestate"] == nil)

                // OAuth2 client credentials: the token-endpoint call under the request.
                let oauthToken = try await register("as", credentials: false)
                let oauth = try await get("/v1/proxy/oauth-api/data", oauthToken)
                #expect(oauth.status == 200, "\(oauth.text)")
                let oauthTrace = try await receiver.waitForTrace(timeout: .seconds(20)) { spans in
                    spans.contains { $0.name == "oauth2 token request" } && spans.contains { $0.name == "upstream exchange" }
                }
                print("span tree of GET /v1/proxy/oauth-api/data (client credentials):\n" + SpanRecord.tree(oauthTrace))
                let oauthRoots = oauthTrace.filter(\.isRoot)
                let tokenSpans = oauthTrace.filter { $0.name == "oauth2 token request" }
                let oauthRoot = try #require(oauthRoots.first)
                let tokenSpan = try #require(tokenSpans.first)
                #expect(tokenSpan.parent == oauthRoot.id)
                #expect(tokenSpan.attributes["oauth2.grant_type"] == "client_credentials")
                #expect(tokenSpan.attributes["oauth2.outcome"] == "token")
                _ = simulator
                await parley.stop()
            }
        }
    }

    /// The span tree of a proxied call answered after one Basic challenge. Closures are kept out
    /// of `#expect` here: Swift 6.3 can give a closure inside a macro argument the same symbol as
    /// a closure beside it, and then one runs in the other's place.
    static func checkBasicTrace(_ trace: [SpanRecord]) throws {
        let roots = trace.filter(\.isRoot)
        #expect(roots.count == 1, "one root")
        let root = try #require(roots.first)
        #expect(root.name == "GET /v1/proxy/**")
        #expect(root.kind == "SERVER" || root.kind == "2" || root.kind == "SPAN_KIND_SERVER", "\(root.kind)")
        #expect(root.attributes["http.route"] == "/v1/proxy/**")
        #expect(root.attributes["http.response.status_code"] == "200")
        let exchanges = trace.filter { $0.name == "upstream exchange" }.sorted { $0.start < $1.start }
        let exchangeParents = exchanges.map(\.parent)
        let attempts = exchanges.map { $0.attributes["parley.attempt"] }
        let statuses = exchanges.map { $0.attributes["http.response.status_code"] }
        let addresses = Set(exchanges.map { "\($0.attributes["http.request.method"] ?? "-") \($0.attributes["server.address"] ?? "-")" })
        #expect(exchanges.count == 2)
        #expect(exchangeParents == [root.id, root.id], "the exchanges are children of the request")
        #expect(attempts == ["0", "1"])
        #expect(statuses == ["401", "200"])
        #expect(addresses == ["GET 127.0.0.1"])
        #expect(exchanges.first?.events.map(\.name) == ["conversation restart"])
        #expect(exchanges.first?.events.first?.attributes["parley.restart.reason"] == "challenge basic")
        #expect(exchanges.last?.events.isEmpty == true)
        let store = trace.filter(\.isStore)
        let ids = Set(trace.map(\.id))
        let orphans = store.filter { !ids.contains($0.parent ?? "") }.map(\.name)
        #expect(!store.isEmpty, "store calls are in the trace")
        #expect(orphans == [], "store spans hang under the request")
    }

    @Test func anUnknownTracesSettingIsRefusedAtStart() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        var env = ServeTests.environment(database: database, destinations: try ServeTests.destinationsFile(simulatorPort: 1))
        env["PARLEY_OTEL_TRACES"] = "jaeger"
        let refused = try await ParleyProcess.start(environment: env, waitForReady: false)
        #expect(try await refused.waitForExit() == 78)
        #expect(refused.log.contains("PARLEY_OTEL_TRACES"))
    }
}

/// One span as the receiver decoded it from OTLP/JSON.
struct SpanRecord: Sendable {
    struct Event: Sendable {
        var name: String
        var attributes: [String: String]
    }
    var trace: String
    var id: String
    var parent: String?
    var name: String
    var kind: String
    var start: UInt64
    var end: UInt64
    var attributes: [String: String]
    var events: [Event]
    var isStore: Bool { attributes["db.system"] == "postgresql" }
    var isRoot: Bool { parent == nil }

    static func attributes(_ list: Any?) -> [String: String] {
        var result: [String: String] = [:]
        for item in list as? [[String: Any]] ?? [] {
            guard let key = item["key"] as? String, let value = item["value"] as? [String: Any], let first = value.first else { continue }
            result[key] = "\(first.value)"
        }
        return result
    }

    static func number(_ value: Any?) -> UInt64 {
        if let string = value as? String { return UInt64(string) ?? 0 }
        return (value as? NSNumber)?.uint64Value ?? 0
    }

    /// Trace and span ids in hex, whether the exporter wrote hex or base64.
    static func hex(_ id: String) -> String {
        if id.utf8.count % 2 == 0, id.allSatisfy(\.isHexDigit) { return id.lowercased() }
        guard let data = Data(base64Encoded: id) else { return id }
        return data.map { String(format: "%02x", $0) }.joined()
    }

    static func decode(_ body: Data) -> [SpanRecord] {
        guard let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return [] }
        var spans: [SpanRecord] = []
        for resource in json["resourceSpans"] as? [[String: Any]] ?? [] {
            for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                for span in scope["spans"] as? [[String: Any]] ?? [] {
                    let parent = (span["parentSpanId"] as? String).flatMap { $0.isEmpty ? nil : $0 }
                    spans.append(
                        SpanRecord(
                            trace: span["traceId"] as? String ?? "", id: span["spanId"] as? String ?? "", parent: parent,
                            name: span["name"] as? String ?? "", kind: "\(span["kind"] ?? "")",
                            start: number(span["startTimeUnixNano"]), end: number(span["endTimeUnixNano"]),
                            attributes: attributes(span["attributes"]),
                            events: (span["events"] as? [[String: Any]] ?? []).map {
                                Event(name: $0["name"] as? String ?? "", attributes: attributes($0["attributes"]))
                            }))
                }
            }
        }
        return spans
    }

    /// The spans of one trace as an indented tree, children in start order.
    static func tree(_ spans: [SpanRecord]) -> String {
        let ids = Set(spans.map(\.id))
        var lines: [String] = []
        func visit(_ span: SpanRecord, depth: Int) {
            let interesting = span.attributes.filter { !$0.key.hasPrefix("net.") }.sorted { $0.key < $1.key }
            let ms = Double(span.end &- span.start) / 1_000_000
            lines.append(
                String(repeating: "  ", count: depth) + "\(span.name) [\(String(format: "%.1f", ms)) ms] "
                    + interesting.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
            for event in span.events {
                lines.append(
                    String(repeating: "  ", count: depth + 1) + "* event \(event.name) "
                        + event.attributes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
            }
            for child in spans.filter({ $0.parent == span.id }).sorted(by: { $0.start < $1.start }) { visit(child, depth: depth + 1) }
        }
        for root in spans.filter({ $0.parent.map { !ids.contains($0) } ?? true }).sorted(by: { $0.start < $1.start }) { visit(root, depth: 0) }
        return lines.joined(separator: "\n")
    }
}

/// Collects the spans POSTed to `/v1/traces`.
final class OTLPReceiver: Sendable {
    private let received = Mutex<[SpanRecord]>([])

    var spans: [SpanRecord] { received.withLock { $0 } }

    func record(_ spans: [SpanRecord]) { received.withLock { $0 += spans } }

    /// The first trace (all spans sharing a trace id) that `matches`, polled until `timeout`.
    func waitForTrace(timeout: Duration, _ matches: ([SpanRecord]) -> Bool) async throws -> [SpanRecord] {
        let deadline = ContinuousClock.now + timeout
        var seen = Set<String>()
        while ContinuousClock.now < deadline {
            let all = spans
            for trace in Dictionary(grouping: all, by: \.trace).values where matches(trace) {
                // Settled: the same spans twice in a row (a batch may still carry the rest).
                let key = trace.map(\.id).sorted().joined()
                if seen.contains(key) { return trace }
                seen.insert(key)
            }
            try await Task.sleep(for: .milliseconds(150))
        }
        throw RawHTTPError(description: "no matching trace within \(timeout); received \(spans.count) spans:\n" + SpanRecord.tree(spans))
    }
}

func withOTLPReceiver<T>(_ body: (_ port: Int, _ receiver: OTLPReceiver) async throws -> T) async throws -> T {
    let receiver = OTLPReceiver()
    let router = Router()
    router.post("/v1/traces") { request, context -> Response in
        let buffer = try await request.body.collect(upTo: 16 << 20)
        receiver.record(SpanRecord.decode(Data(buffer.readableBytesView)))
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{}")))
    }
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    let app = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: quietLogger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await app.runService(gracefulShutdownSignals: []) }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw RawHTTPError(description: "the OTLP receiver did not start") }
        let result = try await body(port, receiver)
        group.cancelAll()
        while let _ = try? await group.next() {}
        return result
    }
}
