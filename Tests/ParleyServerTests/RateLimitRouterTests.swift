import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Synchronization
import Testing

/// `429 rate_limited` with `Retry-After`: reached, nothing stored, lifted as time passes.
@Suite struct RateLimitRouterTests {
    static let limits = RateLimitSettings(
        registrations: RateLimit(count: 3, period: .seconds(60)), proxy: RateLimit(count: 2, period: .seconds(10)),
        tokenCalls: RateLimit(count: 1, period: .seconds(60)), failedLogins: RateLimit(count: 2, period: .seconds(900)),
        web: RateLimit(count: 2, period: .seconds(60)), flows: RateLimit(count: 2, period: .seconds(60)),
        failedAdmin: RateLimit(count: 2, period: .seconds(300)), failedClientTokens: RateLimit(count: 2, period: .seconds(60)))

    /// A Basic-protected API, a password-grant API and its token endpoint.
    static func upstream(_ request: UpstreamRequest) -> UpstreamResponse {
        let url = URLParts(request.url)
        if url?.path == "/token" || url?.path == "/short-token" {
            // `/short-token`'s tokens are stale 31 s later (the broker renews 30 s early).
            let lifetime = url?.path == "/token" ? 3600 : 60
            return .text(200, #"{"access_token":"at-\#(UUID().uuidString)","token_type":"Bearer","expires_in":\#(lifetime)}"#,
                headers: ["Content-Type": "application/json"])
        }
        if url?.host == "oauth.example" {
            return (request.headers["Authorization"] ?? "").hasPrefix("Bearer at-") ? .text(200, "{}") : .text(401)
        }
        return request.headers["Authorization"] == "Basic YWxpY2U6d29uZGVybGFuZA==" ? .text(200, "{}")
            : .text(401, headers: ["WWW-Authenticate": "Basic realm=\"x\""])
    }

    static func withRouter(
        clock: TestClock, registrations: InMemoryRegistrations = InMemoryRegistrations(), audit: InMemoryAudit = InMemoryAudit(),
        limits: RateLimitSettings = RateLimitRouterTests.limits, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let basic = try DestinationSpec(name: "sim", url: "https://sim.example", basic: .init()).validated()
        let form = try DestinationSpec(name: "form", url: "https://form.example", basic: .init(form: true)).validated()
        var oauth = DestinationSpec(name: "as", url: "https://oauth.example")
        oauth.oauth2 = .init(
            grant: "password", authorizationEndpoint: nil, tokenEndpoint: "https://auth.example/token", revocationEndpoint: nil,
            clientId: "parley", clientSecret: "s", clientAuthentication: nil, scopes: nil, scopeKeys: nil, challenge: nil)
        var short = oauth
        short.name = "short"
        short.oauth2?.tokenEndpoint = "https://auth.example/short-token"
        let configuration = ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
            keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
            destinations: [basic, form, try oauth.validated(), try short.validated()], rateLimits: limits)
        var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { upstream($0) }, clock: clock, audit: audit)
        dependencies.registrations = registrations
        let app = try buildApplication(configuration: configuration, dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func register(_ client: any TestClientProtocol, _ destination: String, credentials: Bool = true) async throws -> TestResponse {
        var object: [String: Any] = ["destination": destination]
        if credentials { object["credentials"] = ["username": "alice", "password": "wonderland"] }
        return try await client.execute(uri: "/v1/registrations", method: .post, body: try RouterTests.body(object))
    }

    static func expectLimited(_ response: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        RouterTests.expectProblem(response, .tooManyRequests, "rate_limited", sourceLocation: sourceLocation)
        #expect((response.headers[.retryAfter].flatMap(Int.init) ?? 0) >= 1, sourceLocation: sourceLocation)
    }

    @Test func registrationsPerClientAddress() async throws {
        let clock = TestClock()
        let registrations = InMemoryRegistrations()
        try await Self.withRouter(clock: clock, registrations: registrations) { client in
            for _ in 0..<3 { #expect(try await Self.register(client, "sim").status == .created) }
            let limited = try await Self.register(client, "sim")
            Self.expectLimited(limited)
            #expect(registrations.all.count == 3, "a refused registration was stored")
            #expect(limited.headers[.retryAfter] == "20")
            clock.advance(by: .seconds(20))
            #expect(try await Self.register(client, "sim").status == .created)
            Self.expectLimited(try await Self.register(client, "sim"))
        }
    }

    @Test func proxiedRequestsPerRegistration() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            let tokens = try await [Self.register(client, "sim"), Self.register(client, "sim")].map {
                RouterTests.json($0.body)["clientToken"] as? String ?? ""
            }
            let first: HTTPFields = [.authorization: "Bearer \(tokens[0])"]
            for _ in 0..<2 { #expect(try await client.execute(uri: "/v1/proxy/a", method: .get, headers: first).status == .ok) }
            Self.expectLimited(try await client.execute(uri: "/v1/proxy/a", method: .get, headers: first))
            // Another registration has its own budget.
            #expect(try await client.execute(uri: "/v1/proxy/a", method: .get, headers: [.authorization: "Bearer \(tokens[1])"]).status == .ok)
            clock.advance(by: .seconds(5))
            #expect(try await client.execute(uri: "/v1/proxy/a", method: .get, headers: first).status == .ok)
        }
    }

    /// The in-flight cap through the router: a second request while the first still waits on
    /// its upstream is `429`, counted as `limit="in_flight"`; the first one then completes.
    @Test func inFlightCapRefusesAndCountsTheRefusal() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
        let transport = FakeTransport { _ in
            arrival.yield()
            for await _ in released { break }
            return .text(200, "{}")
        }
        let configuration = ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [try DestinationSpec(name: "slow", url: "https://slow.example").validated()],
            limits: .init(maxInFlightPerRegistration: 1))
        let app = try buildApplication(
            configuration: configuration, dependencies: .inMemory(transport: transport, clock: TestClock()), logger: quietLogger)
        try await app.test(.router) { client in
            let token = RouterTests.json(try await Self.register(client, "slow", credentials: false).body)["clientToken"] as? String ?? ""
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            async let first = client.execute(uri: "/v1/proxy/a", method: .get, headers: auth)
            for await _ in arrived { break }
            Self.expectLimited(try await client.execute(uri: "/v1/proxy/b", method: .get, headers: auth))
            release.yield()
            #expect(try await first.status == .ok)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_rate_limited_total{limit="in_flight"} 1"#), "\(metrics)")
            // The slot was given back.
            release.yield()
            #expect(try await client.execute(uri: "/v1/proxy/c", method: .get, headers: auth).status == .ok)
        }
    }

    @Test func tokenEndpointCallsKeepTheStoredTokens() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            let token = RouterTests.json(try await Self.register(client, "short").body)["clientToken"] as? String ?? ""
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            // The grant: this registration's one call within the minute.
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status == .ok)
            // Its token is stale half a minute later; renewing it would be the second call.
            clock.advance(by: .seconds(31))
            Self.expectLimited(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth))
            clock.advance(by: .seconds(29))
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status == .ok)
        }
    }

    /// The token-endpoint budget belongs to the tokens' owner: one registration that spends
    /// its own does not refuse another registration's grant or refresh.
    @Test func oneRegistrationSpendingItsTokenBudgetLeavesOthersAlone() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            let tokens = try await [Self.register(client, "short"), Self.register(client, "short")].map {
                RouterTests.json($0.body)["clientToken"] as? String ?? ""
            }
            let first: HTTPFields = [.authorization: "Bearer \(tokens[0])"]
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: first).status == .ok)
            clock.advance(by: .seconds(31))
            Self.expectLimited(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: first))
            // The second registration's grant is its own first call.
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: [.authorization: "Bearer \(tokens[1])"]).status == .ok)
        }
    }

    @Test func tokenCallsAreKeyedByTheTokensOwner() {
        let limits = RateLimits(
            settings: RateLimitSettings(tokenCalls: RateLimit(count: 1, period: .seconds(60))), clock: TestClock(), metrics: Metrics())
        let shared = TokenKey(destination: "cc", registrationID: nil, scopeKey: "default")
        #expect(limits.admit(shared) == nil)
        // Shared client-credentials tokens: one budget for the destination, whatever the scope.
        #expect(limits.admit(TokenKey(destination: "cc", registrationID: nil, scopeKey: "other")) != nil)
        #expect(limits.admit(TokenKey(destination: "other", registrationID: nil, scopeKey: "default")) == nil)
        // Per registration and destination.
        #expect(limits.admit(TokenKey(destination: "cc", registrationID: "r1", scopeKey: "default")) == nil)
        #expect(limits.admit(TokenKey(destination: "cc", registrationID: "r1", scopeKey: "default")) != nil)
        #expect(limits.admit(TokenKey(destination: "cc", registrationID: "r2", scopeKey: "default")) == nil)
    }

    /// A `401` to a token this conversation has just obtained is handed on: the token
    /// endpoint is asked once, not again for every challenge.
    @Test func aChallengeToAFreshTokenIsNotRenewedAgain() async throws {
        let tokenCalls = Atomic<Int>(0)
        let transport = FakeTransport { request in
            if URLParts(request.url)?.host == "auth.example" {
                tokenCalls.add(1, ordering: .relaxed)
                return .text(200, #"{"access_token":"at-\#(UUID().uuidString)","token_type":"Bearer","expires_in":3600}"#,
                    headers: ["Content-Type": "application/json"])
            }
            return .text(401, headers: ["WWW-Authenticate": "Bearer error=\"invalid_token\""])
        }
        var spec = DestinationSpec(name: "deaf", url: "https://deaf.example")
        spec.oauth2 = .init(
            grant: "password", authorizationEndpoint: nil, tokenEndpoint: "https://auth.example/token", revocationEndpoint: nil,
            clientId: "parley", clientSecret: "s", clientAuthentication: nil, scopes: nil, scopeKeys: nil, challenge: nil)
        let configuration = ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [try spec.validated()])
        let clock = TestClock()
        let app = try buildApplication(
            configuration: configuration, dependencies: .inMemory(transport: transport, clock: clock), logger: quietLogger)
        try await app.test(.router) { client in
            let token = RouterTests.json(try await Self.register(client, "deaf").body)["clientToken"] as? String ?? ""
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            // No token yet: the challenge gets one (one call); the fresh one is refused too.
            let first = try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth)
            #expect(first.status != .ok)
            #expect(tokenCalls.load(ordering: .relaxed) == 1)
            // A stored token past its expiry is renewed before it is sent (one call); the `401`
            // that answers the renewed token is not a reason to call again.
            clock.advance(by: .seconds(3600))
            _ = try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth)
            #expect(tokenCalls.load(ordering: .relaxed) == 2)
        }
    }

    /// The hosted upstream's web path is limited per client address, before any binding
    /// cookie is read: the browser gets a page with `Retry-After`.
    @Test func theWebPathPerClientAddress() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            for _ in 0..<2 { #expect(try await client.execute(uri: "/web/sim/page", method: .get).status == .forbidden) }
            let limited = try await client.execute(uri: "/web/sim/page", method: .get)
            #expect(limited.status == .tooManyRequests)
            #expect(limited.headers[.retryAfter] == "30")
            #expect(String(buffer: limited.body).contains("data-parley-error=\"rate_limited\""))
            // A refusal of the web path is boxed like every other answer there.
            #expect(limited.headers[.xFrameOptions] == "DENY")
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_rate_limited_total{limit="web"} 1"#), "\(metrics)")
            clock.advance(by: .seconds(30))
            #expect(try await client.execute(uri: "/web/sim/page", method: .get).status == .forbidden)
        }
    }

    /// Parley's own pages and callbacks cost a database query each and need no authentication:
    /// each client address has a limit, refused with an HTML page for a browser and with
    /// problem+json for the identity provider's back-channel logout.
    @Test func pagesAndCallbacksPerClientAddress() async throws {
        let clock = TestClock()
        var limits = Self.limits
        limits.pages = RateLimit(count: 3, period: .seconds(60))
        try await Self.withRouter(clock: clock, limits: limits) { client in
            let unknown = "/flows/\(UUID().uuidString.lowercased())?k=x"
            #expect(try await client.execute(uri: unknown, method: .get).status == .notFound)
            #expect(try await client.execute(uri: "/callback/oauth2?state=x&code=y", method: .get).status == .badRequest)
            #expect(try await client.execute(uri: "/flows/\(UUID().uuidString.lowercased())/done", method: .get).status == .notFound)
            let limited = try await client.execute(uri: unknown, method: .get)
            #expect(limited.status == .tooManyRequests)
            #expect(limited.headers[.retryAfter] == "20")
            #expect(String(buffer: limited.body).contains("data-parley-error=\"rate_limited\""))
            let logout = try await client.execute(
                uri: "/backchannel-logout", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "logout_token=x"))
            Self.expectLimited(logout)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_rate_limited_total{limit="pages"} 2"#), "\(metrics)")
            clock.advance(by: .seconds(20))
            #expect(try await client.execute(uri: unknown, method: .get).status == .notFound)
        }
    }

    /// A client token that matches nothing costs a lookup: an address that shows too many is
    /// refused before the next lookup, until its limit refills.
    @Test func unknownClientTokensPerClientAddress() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            for n in 0..<2 {
                let answer = try await client.execute(uri: "/v1/registrations/me", method: .get, headers: [.authorization: "Bearer pct_guess\(n)"])
                RouterTests.expectProblem(answer, .unauthorized, "invalid_client_token")
            }
            Self.expectLimited(try await client.execute(uri: "/v1/registrations/me", method: .get, headers: [.authorization: "Bearer pct_guess3"]))
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_rate_limited_total{limit="failed_client_tokens"} 1"#), "\(metrics)")
            clock.advance(by: .seconds(30))
            RouterTests.expectProblem(
                try await client.execute(uri: "/v1/registrations/me", method: .get, headers: [.authorization: "Bearer pct_guess4"]), .unauthorized,
                "invalid_client_token")
        }
    }

    @Test func startingFlowsPerRegistration() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            let tokens = try await [Self.register(client, "form", credentials: false), Self.register(client, "form", credentials: false)].map {
                RouterTests.json($0.body)["clientToken"] as? String ?? ""
            }
            func start(_ token: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                    body: ByteBuffer(string: "{}"))
            }
            for _ in 0..<2 { #expect(try await start(tokens[0]).status == .created) }
            Self.expectLimited(try await start(tokens[0]))
            #expect(try await start(tokens[1]).status == .created)
            clock.advance(by: .seconds(30))
            #expect(try await start(tokens[0]).status == .created)
        }
    }

    /// Wrong admin tokens are counted per client address and audited (never the token); over
    /// the limit even the right token waits, so guessing cannot go on behind it. A request
    /// without a token is no attempt: neither counted nor audited.
    @Test func failedAdminAuthenticationsAreLimitedAndAudited() async throws {
        let clock = TestClock()
        let audit = InMemoryAudit()
        try await Self.withRouter(clock: clock, audit: audit) { client in
            func list(_ token: String?) async throws -> TestResponse {
                try await client.execute(
                    uri: "/admin/v1/registrations", method: .get, headers: token.map { [.authorization: "Bearer \($0)"] } ?? [:])
            }
            let wrong = "wrong-admin-token-guess-0123456789-abcdefgh"
            #expect(try await list(nil).status == .unauthorized)
            #expect(try await list(wrong).status == .unauthorized)
            #expect(try await list(wrong + "2").status == .unauthorized)
            let limited = try await list(RouterTests.adminToken)
            Self.expectLimited(limited)
            let failures = audit.events.filter { $0.action == "admin.authentication_failed" }
            #expect(failures.count == 2)
            #expect(failures.allSatisfy { $0.actor == .system && $0.detail["client"] != nil })
            #expect(!audit.events.contains { event in event.detail.values.contains { $0.contains("wrong-admin") } })
            clock.advance(by: .seconds(150))
            #expect(try await list(RouterTests.adminToken).status == .ok)
        }
    }

    @Test func failedSignInsPerRegistrationInTheBasicForm() async throws {
        let clock = TestClock()
        try await Self.withRouter(clock: clock) { client in
            let token = RouterTests.json(try await Self.register(client, "form", credentials: false).body)["clientToken"] as? String ?? ""
            let flow = try await client.execute(uri: "/v1/proxy/api", method: .get, headers: [.authorization: "Bearer \(token)"]) {
                RouterTests.json($0.body)["flow"] as? [String: Any] ?? [:]
            }
            let id = flow["id"] as? String ?? ""
            let k = (flow["url"] as? String)?.split(separator: "k=").last.map(String.init) ?? ""
            func submit(_ password: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/flows/\(id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: "k=\(k)&username=alice&password=\(password)"))
            }
            #expect(try await submit("wrong1").status == .ok)
            #expect(try await submit("wrong2").status == .ok)
            // Even the right password waits now.
            let limited = try await submit("wonderland")
            #expect(limited.status == .tooManyRequests)
            #expect(String(buffer: limited.body).contains("data-parley-error=\"rate_limited\""))
            clock.advance(by: .seconds(450))
            #expect(try await submit("wonderland").status == .seeOther)
        }
    }

    /// Failures count against the registration that made them and against what was tried from
    /// where, never against the `userHint` a client chose: mallory's registration, naming
    /// itself "alice", cannot lock alice's own registration out.
    @Test func failedSignInsUnderSomebodyElsesHintLockOnlyTheirOwnRegistration() async throws {
        try await Self.withRouter(clock: TestClock()) { client in
            func registration(hint: String) async throws -> (id: String, k: String) {
                let body = try RouterTests.body(["destination": "form", "userHint": hint])
                let token = RouterTests.json(try await client.execute(uri: "/v1/registrations", method: .post, body: body).body)["clientToken"]
                let flow = try await client.execute(
                    uri: "/v1/proxy/api", method: .get, headers: [.authorization: "Bearer \(token as? String ?? "")"]
                ) { RouterTests.json($0.body)["flow"] as? [String: Any] ?? [:] }
                return (flow["id"] as? String ?? "", (flow["url"] as? String)?.split(separator: "k=").last.map(String.init) ?? "")
            }
            func submit(_ flow: (id: String, k: String), _ username: String, _ password: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/flows/\(flow.id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: "k=\(flow.k)&username=\(username)&password=\(password)"))
            }
            let mallory = try await registration(hint: "alice")
            #expect(try await submit(mallory, "mallory", "guess1").status == .ok)
            #expect(try await submit(mallory, "mallory", "guess2").status == .ok)
            let limited = try await submit(mallory, "mallory", "guess3")
            #expect(limited.status == .tooManyRequests)
            #expect(String(buffer: limited.body).contains("data-parley-error=\"rate_limited\""))
            let alice = try await registration(hint: "alice")
            #expect(try await submit(alice, "alice", "wonderland").status == .seeOther)
        }
    }

    @Test func loginAttemptsAreKeyedOnWhatWasTriedAndWhere() {
        let registration = UUID()
        #expect(LoginAttempt(registration: registration).keys == ["r:" + registration.uuidString])
        #expect(
            LoginAttempt(registration: registration, tried: "Alice", client: "192.0.2.9").keys
                == ["r:" + registration.uuidString, "u:alice|192.0.2.9"])
        #expect(LoginAttempt(registration: registration, tried: "alice", client: nil).keys.count == 1)
    }

    @Test func forwardedForCountsOnlyFromTrustedProxies() {
        let limits = RateLimits(
            settings: RateLimitSettings(trustedProxies: ["10.0.0.5", "10.0.0.6"].compactMap { IPRange($0) }), clock: TestClock(),
            metrics: Metrics())
        #expect(limits.clientAddress(peer: "192.0.2.9", forwardedFor: "198.51.100.1") == "192.0.2.9")
        #expect(limits.clientAddress(peer: "10.0.0.5", forwardedFor: "198.51.100.1") == "198.51.100.1")
        #expect(limits.clientAddress(peer: "10.0.0.5", forwardedFor: "203.0.113.7, 198.51.100.1, 10.0.0.6") == "198.51.100.1")
        #expect(limits.clientAddress(peer: "10.0.0.5", forwardedFor: nil) == "10.0.0.5")
        #expect(limits.clientAddress(peer: nil, forwardedFor: "198.51.100.1") == "unknown")
        #expect(RateLimit.parse("30/60") == .some(RateLimit(count: 30, period: .seconds(60))))
        #expect(RateLimit.parse("off") == .some(nil))
        #expect(RateLimit.parse("30") == nil)
        #expect(RateLimit.parse("0/60") == nil)
    }
}
