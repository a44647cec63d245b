import ParleyEncoding
import Conversation
import ParleyCrypto
import ParleyTesting
import Synchronization
import Testing

/// Appends its name to a header so tests can see the order filters ran in.
struct TagFilter: RequestFilter {
    let name: String
    func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
        request.headers.set("X-Trail", (request.headers["X-Trail"].map { $0 + "," } ?? "") + name)
        return .proceed
    }
}

struct RecordingResponseFilter: ResponseFilter {
    let name: String
    let trail: Mutex<[String]>.Box
    func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        trail.value.withLock { $0.append(name) }
        return .deliver
    }
}

extension Mutex where Value: Sendable {
    final class Box: Sendable {
        let value: Mutex<Value>
        init(_ v: Value) { value = Mutex(v) }
    }
}

enum AttemptsKey: ConversationContextKey { typealias Value = Int }

/// Counts attempts in the context; asks for a restart until `restarts` were made.
struct RestartingFilter: ResponseFilter {
    let restarts: Int
    func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        let seen = (conversation[AttemptsKey.self] ?? 0) + 1
        conversation[AttemptsKey.self] = seen
        return seen <= restarts ? .restart(reason: .tokenRenewed) : .deliver
    }
}

struct FixedBasic: ChallengeFilter {
    func handle(_ challenge: Challenge, conversation: Conversation) async throws -> ChallengeDecision {
        guard challenge.protectionSpace.method == .basic, challenge.previousFailureCount == 0 else { return .notHandled }
        return .retry(with: .basic(username: "alice", password: "wonderland"))
    }
}

@Suite struct EngineTests {
    static let aliceHeader = "Basic YWxpY2U6d29uZGVybGFuZA=="

    static func basicServer(password: String = "wonderland") -> FakeTransport {
        FakeTransport { request in
            if request.headers["Authorization"] == "Basic " + "alice:\(password)".base64 {
                return .text(200, "ok")
            }
            return .text(401, "no", headers: ["WWW-Authenticate": "Basic realm=\"smp\""])
        }
    }

    @Test func requestFiltersRunInOrderThenResponseFilters() async throws {
        let transport = FakeTransport { _ in .text(200, "ok") }
        let trail = Mutex<[String]>.Box([])
        let manager = ConversationManager(
            transport: transport, requestFilters: [TagFilter(name: "a"), TagFilter(name: "b"), TagFilter(name: "c")],
            responseFilters: [RecordingResponseFilter(name: "x", trail: trail), RecordingResponseFilter(name: "y", trail: trail)])
        let result = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        guard case .response(let response) = result else { Issue.record("expected a response"); return }
        #expect(response.status == 200)
        #expect(transport.requests.map { $0.headers["X-Trail"] } == ["a,b,c"])
        #expect(trail.value.withLock { $0 } == ["x", "y"])
    }

    @Test func challengeRestartsWithCredentials() async throws {
        let transport = Self.basicServer()
        let manager = ConversationManager(transport: transport, challengeFilters: [FixedBasic()])
        let result = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        guard case .response(let response) = result else { Issue.record("expected a response"); return }
        #expect(response.status == 200)
        #expect(transport.requests.count == 2)
        #expect(transport.requests[0].headers["Authorization"] == nil)
        #expect(transport.requests[1].headers["Authorization"] == Self.aliceHeader)
    }

    @Test func failedCredentialsAreTriedOnceAndTheUpstream401IsDelivered() async throws {
        let transport = Self.basicServer(password: "other")
        let manager = ConversationManager(transport: transport, challengeFilters: [FixedBasic()])
        let result = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        guard case .response(let response) = result else { Issue.record("expected a response"); return }
        #expect(response.status == 401)
        #expect(try await response.body.collect(upTo: 100) == Array("no".utf8))
        #expect(transport.requests.count == 2)
    }

    @Test func responseFilterRestartKeepsContext() async throws {
        let transport = FakeTransport { _ in .text(200) }
        let manager = ConversationManager(transport: transport, responseFilters: [RestartingFilter(restarts: 2)])
        let result = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        guard case .response = result else { Issue.record("expected a response"); return }
        // Two restarts: three exchanges, and the context counted all three.
        #expect(transport.requests.count == 3)
    }

    @Test func restartLimitEndsLoops() async throws {
        let transport = FakeTransport { _ in .text(200) }
        let manager = ConversationManager(
            transport: transport, responseFilters: [RestartingFilter(restarts: 100)], maxRestarts: 3)
        await #expect(throws: ConversationError.self) {
            _ = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        }
        do {
            _ = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        } catch let error as ConversationError {
            #expect(error.code == .restartLimitExceeded)
        }
        #expect(transport.requests.count == 8)
    }

    @Test func sideRequestsSkipRequestFiltersAlreadyRun() async throws {
        struct SideRequester: RequestFilter {
            func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
                guard request.url.hasSuffix("/main") else { return .proceed }
                _ = try await conversation.manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/side"))
                return .proceed
            }
        }
        let transport = FakeTransport { _ in .text(200) }
        let manager = ConversationManager(
            transport: transport, requestFilters: [TagFilter(name: "a"), SideRequester(), TagFilter(name: "c")])
        _ = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/main"))
        let byURL = Dictionary(uniqueKeysWithValues: transport.requests.map { ($0.url, $0.headers["X-Trail"]) })
        #expect(byURL["https://up.example/side"] == "c")
        #expect(byURL["https://up.example/main"] == "a,c")
    }

    @Test func interactionRequiredEndsTheConversation() async throws {
        struct NeedsLogin: ResponseFilter {
            func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation)
                async throws -> ResponseDecision
            {
                response.status == 401 ? .interactionRequired(InteractionRequest(kind: .oauth2, url: request.url)) : .deliver
            }
        }
        let transport = FakeTransport { _ in .text(401) }
        let manager = ConversationManager(transport: transport, responseFilters: [NeedsLogin()])
        let result = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/r"))
        guard case .interactionRequired(let interaction) = result else { Issue.record("expected interaction"); return }
        #expect(interaction.kind == .oauth2)
        #expect(transport.requests.count == 1)
    }

    @Test func concurrentConversationsKeepTheirContextsApart() async throws {
        enum MarkKey: ConversationContextKey { typealias Value = String }
        struct Marker: RequestFilter {
            func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
                if conversation[MarkKey.self] == nil { conversation[MarkKey.self] = request.headers["X-Id"] }
                request.headers.set("X-Mark", conversation[MarkKey.self] ?? "")
                return .proceed
            }
        }
        let transport = FakeTransport { request in
            await Task.yield()
            return .text(200, request.headers["X-Mark"] ?? "")
        }
        let manager = ConversationManager(
            transport: transport, requestFilters: [Marker()], responseFilters: [RestartingFilter(restarts: 1)])
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<100 {
                group.addTask {
                    var request = UpstreamRequest(method: "GET", url: "https://up.example/\(i)")
                    request.headers.set("X-Id", "\(i)")
                    guard case .response(let response) = try await manager.execute(request) else { return (i, "") }
                    return (i, String(decoding: try await response.body.collect(upTo: 100), as: UTF8.self))
                }
            }
            for try await (i, mark) in group { #expect(mark == "\(i)") }
        }
        #expect(transport.requests.count == 200)
    }

    @Test func sessionHeadersAndCookiesApplyToEveryExchange() async throws {
        actor Jar: CookieStorage {
            var stored: [String] = []
            func cookieHeader(for url: String) async throws -> String? { stored.isEmpty ? nil : stored.joined(separator: "; ") }
            func store(setCookies: [String], from url: String) async throws { stored += setCookies.map { String($0.split(separator: ";")[0]) } }
        }
        let transport = FakeTransport { request in
            request.headers["Cookie"] == nil ? .text(200, headers: ["Set-Cookie": "s=1; Path=/"]) : .text(200)
        }
        let manager = ConversationManager(
            transport: transport, session: SessionConfiguration(cookieJar: Jar(), headers: ["X-SMP-APPCID": "app-1"]))
        _ = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/a"))
        _ = try await manager.execute(UpstreamRequest(method: "GET", url: "https://up.example/b"))
        #expect(transport.requests.map { $0.headers["Cookie"] } == [nil, "s=1"])
        #expect(transport.requests.allSatisfy { $0.headers["X-SMP-APPCID"] == "app-1" })
    }

    /// Managers made from one template share its filters; each has its own session and party,
    /// and its TLS options and timeouts are the template's unless its session has others.
    @Test func managersServingPartiesShareTheTemplatesFiltersAndKeepTheirOwnSessions() async throws {
        final class Party: ConversationParty {
            let id: String
            init(_ id: String) { self.id = id }
        }
        struct NamesTheParty: RequestFilter {
            func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
                request.headers.set("X-Party", conversation.party?.id ?? "none")
                return .proceed
            }
        }
        let transport = FakeTransport { _ in .text(200) }
        let destinationTLS = TLSOptions(caPEM: Array("destination CA".utf8))
        let template = ConversationManager(
            transport: transport, session: SessionConfiguration(tls: destinationTLS, timeouts: Timeouts(connect: .seconds(2))),
            requestFilters: [NamesTheParty()])
        let plain = template.serving(Party("r1"), session: SessionConfiguration(headers: ["X-SMP-APPCID": "a1"], tls: destinationTLS, timeouts: Timeouts(connect: .seconds(2))))
        let ownTLS = TLSOptions(clientPKCS12: [1, 2, 3], caPEM: Array("destination CA".utf8))
        let certified = template.serving(Party("r2"), session: SessionConfiguration(tls: ownTLS, timeouts: Timeouts(connect: .seconds(2))))
        _ = try await plain.execute(UpstreamRequest(method: "GET", url: "https://up.example/a"))
        _ = try await certified.execute(UpstreamRequest(method: "GET", url: "https://up.example/b"))
        _ = try await template.execute(UpstreamRequest(method: "GET", url: "https://up.example/c"))
        let sent = transport.requests
        #expect(sent.map { $0.headers["X-Party"] } == ["r1", "r2", "none"])
        #expect(sent.map { $0.headers["X-SMP-APPCID"] } == ["a1", nil, nil])
        #expect(sent.map(\.tls) == [destinationTLS, ownTLS, destinationTLS])
        #expect(sent.allSatisfy { $0.timeouts.connect == .seconds(2) })
        #expect(certified.session.tls == ownTLS && plain.session.headers["X-SMP-APPCID"] == "a1")
        #expect(plain.requestFilters.count == 1 && certified.droppingRequestFilters(1).requestFilters.isEmpty)
    }

    @Test func peekKeepsTheWholeBody() async throws {
        var response = UpstreamResponse.text(200, "<html>SAMLRequest</html>")
        let head = try await response.peekBody(upTo: 6)
        #expect(head == Array("<html>".utf8))
        #expect(try await response.body.collect(upTo: 100) == Array("<html>SAMLRequest</html>".utf8))
    }

    @Test func managerCacheEvictsIdleManagers() throws {
        let clock = TestClock()
        let cache = ManagerCache<String>(idleTimeout: .seconds(60), clock: clock)
        let transport = FakeTransport { _ in .text(200) }
        var builds = 0
        _ = cache.manager(for: "a") { builds += 1; return ConversationManager(transport: transport) }
        _ = cache.manager(for: "a") { builds += 1; return ConversationManager(transport: transport) }
        #expect(builds == 1)
        clock.advance(by: .seconds(61))
        _ = cache.manager(for: "b") { builds += 1; return ConversationManager(transport: transport) }
        #expect(cache.count == 1)
        _ = cache.manager(for: "a") { builds += 1; return ConversationManager(transport: transport) }
        #expect(builds == 3)
    }

    @Test func headerFieldsRefuseCRLF() {
        var headers = HeaderFields()
        headers.append("X-Bad", "a\r\nSet-Cookie: x=1")
        headers.append("Bad Name", "v")
        headers.append("X-Good", "v")
        #expect(headers.count == 1)
        #expect(headers["x-good"] == "v")
    }

    @Test func urlPartsParseStrictly() {
        let u = URLParts("https://Up.Example:8443/a/b?x=1#frag")
        #expect(u?.host == "up.example")
        #expect(u?.port == 8443)
        #expect(u?.path == "/a/b")
        #expect(u?.query == "x=1")
        #expect(u?.origin == "https://up.example:8443")
        #expect(URLParts("https://user@evil.example/") == nil)
        #expect(URLParts("ftp://x/") == nil)
        #expect(URLParts("https://x\\y/") == nil)
        #expect(URLParts("http://[::1]:8080/p")?.host == "[::1]")
    }
}

extension String {
    var base64: String { Base64.encode(Array(utf8)) }
}
