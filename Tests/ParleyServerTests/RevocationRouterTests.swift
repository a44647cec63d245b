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

/// What a thin client meets after an administrator revoked its tokens.
@Suite struct RevocationRouterTests {
    /// An API that takes any token the fake authorization server issued, and that server.
    final class Upstream: Sendable {
        let tokenCalls = Mutex(0)
        func answer(_ request: UpstreamRequest) -> UpstreamResponse {
            if URLParts(request.url)?.path == "/token" {
                let n = tokenCalls.withLock { calls in
                    calls += 1
                    return calls
                }
                return .text(200, #"{"access_token":"at-\#(n)","token_type":"Bearer","expires_in":3600}"#, headers: ["Content-Type": "application/json"])
            }
            return (request.headers["Authorization"] ?? "").hasPrefix("Bearer at-") ? .text(200, "{}") : .text(401)
        }
    }

    static func withRouter(
        _ upstream: Upstream, tokens: InMemoryTokens, cookies: InMemoryCookies = InMemoryCookies(),
        _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        func spec(_ name: String, _ grant: String) throws -> Destination {
            var d = DestinationSpec(name: name, url: "https://\(name).example")
            d.oauth2 = .init(
                grant: grant, authorizationEndpoint: "https://auth.example/authorize", tokenEndpoint: "https://auth.example/token",
                revocationEndpoint: nil, clientId: "parley", clientSecret: "s", clientAuthentication: nil, scopes: nil, scopeKeys: nil,
                challenge: nil)
            return try d.validated()
        }
        let configuration = ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
            keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
            destinations: [try spec("code", "authorization_code"), try spec("cc", "client_credentials")])
        let registrations = InMemoryRegistrations()
        let audit = InMemoryAudit()
        let dependencies = ParleyDependencies.inMemory(
            transport: FakeTransport { upstream.answer($0) }, registrations: registrations, cookies: cookies, tokens: tokens, audit: audit)
        let app = try buildApplication(configuration: configuration, dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func revoke(_ client: any TestClientProtocol, _ body: String) async throws -> [String: Any] {
        try await client.execute(
            uri: "/admin/v1/revocations", method: .post, headers: [.authorization: "Bearer \(RouterTests.adminToken)"],
            body: ByteBuffer(string: body)
        ) { response in
            #expect(response.status == .ok)
            return RouterTests.json(response.body)
        }
    }

    @Test func anAuthorizationCodeRegistrationNeedsANewFlow() async throws {
        let tokens = InMemoryTokens()
        try await Self.withRouter(Upstream(), tokens: tokens) { client in
            let created = RouterTests.json(
                try await client.execute(uri: "/v1/registrations", method: .post, body: ByteBuffer(string: #"{"destination":"code"}"#)).body)
            let id = try #require(created["id"] as? String)
            let auth: HTTPFields = [.authorization: "Bearer \(created["clientToken"] as? String ?? "")"]
            // A token from an earlier sign-in.
            let key = TokenKey(destination: "code", registrationID: id, scopeKey: "https://code.example")
            try await tokens.exclusively(key) {
                try await $0.save(StoredToken(accessToken: "at-0", refreshToken: nil, tokenType: "Bearer", scopes: nil, expiresAt: nil), for: key, grant: .authorizationCode)
            }
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status == .ok)
            #expect(try await Self.revoke(client, #"{"registrationId":"\#(id)"}"#)["revoked"] as? Int == 1)
            let after = try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth)
            RouterTests.expectProblem(after, .unauthorized, "interaction_required")
            #expect((RouterTests.json(after.body)["flow"] as? [String: Any])?["kind"] as? String == "oauth2")
        }
    }

    @Test func aClientCredentialsDestinationGetsANewTokenByItself() async throws {
        let upstream = Upstream()
        try await Self.withRouter(upstream, tokens: InMemoryTokens()) { client in
            let created = RouterTests.json(
                try await client.execute(uri: "/v1/registrations", method: .post, body: ByteBuffer(string: #"{"destination":"cc"}"#)).body)
            let auth: HTTPFields = [.authorization: "Bearer \(created["clientToken"] as? String ?? "")"]
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status == .ok)
            #expect(upstream.tokenCalls.withLock { $0 } == 1)
            // By destination alone: the destination's shared token goes.
            #expect(try await Self.revoke(client, #"{"destination":"cc"}"#)["revoked"] as? Int == 1)
            #expect(try await Self.revoke(client, #"{"destination":"cc"}"#)["revoked"] as? Int == 0)
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status == .ok)
            #expect(upstream.tokenCalls.withLock { $0 } == 2)
        }
    }

    /// A revocation by user hint or by destination names registrations: their cookie jars go
    /// with their tokens (a session cookie is a credential too). With a scope key it names tokens only.
    @Test func aRevocationByUserHintOrDestinationTakesTheCookieJarsToo() async throws {
        let cookies = InMemoryCookies()
        try await Self.withRouter(Upstream(), tokens: InMemoryTokens(), cookies: cookies) { client in
            func register(_ hint: String) async throws -> String {
                let created = RouterTests.json(
                    try await client.execute(
                        uri: "/v1/registrations", method: .post, body: ByteBuffer(string: #"{"destination":"code","userHint":"\#(hint)"}"#)).body)
                let id = try #require(created["id"] as? String)
                let session = StoredCookie(
                    name: "SESSION", value: "s-\(hint)", domain: "code.example", path: "/", hostOnly: true, secure: true, httpOnly: true, expiresAt: nil)
                try await cookies.apply(registrationID: id, store: [session], delete: [])
                return id
            }
            let alice = try await register("alice")
            let bob = try await register("bob")
            #expect(try await Self.revoke(client, #"{"destination":"code","scopeKey":"https://code.example"}"#)["revoked"] as? Int == 0)
            #expect(try await cookies.cookies(registrationID: alice).count == 1, "a scope key names tokens, not sessions")
            #expect(try await Self.revoke(client, #"{"userHint":"alice"}"#)["revoked"] as? Int == 1)
            #expect(try await cookies.cookies(registrationID: alice).isEmpty)
            #expect(try await cookies.cookies(registrationID: bob).count == 1)
            #expect(try await Self.revoke(client, #"{"destination":"code"}"#)["revoked"] as? Int == 1)
            #expect(try await cookies.cookies(registrationID: bob).isEmpty)
        }
    }
}
