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

/// Administration by user: the list filters by `issuer` and `subject`; a revocation naming a
/// `user` removes the token rows and cookie jars of every registration of that user, on every
/// destination, and nothing of anyone else.
@Suite struct AdminUserRouterTests {
    static let idp = "https://idp.example"
    static let admin: HTTPFields = [.authorization: "Bearer \(RouterTests.adminToken)", .contentType: "application/json"]

    /// Two Basic destinations whose upstream sets a session cookie on the first call of each
    /// registration and records the cookies every request carried.
    final class Upstream: Sendable {
        let cookies = Mutex<[String]>([])
        func answer(_ request: UpstreamRequest) -> UpstreamResponse {
            let cookie = request.headers["Cookie"]
            cookies.withLock { $0.append(cookie ?? "") }
            if cookie == nil {
                let user = request.headers["Authorization"].map { String($0.suffix(8)) } ?? "anon"
                return .text(200, "{}", headers: ["Set-Cookie": "S=\(user)-\(UUID().uuidString.prefix(8)); Path=/"])
            }
            return .text(200, "{}")
        }
    }

    struct Fixture: Sendable {
        let upstream = Upstream()
        let registrations = InMemoryRegistrations()
        let tokens = InMemoryTokens()
        let cookies = InMemoryCookies()
        let audit = InMemoryAudit()

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            let configuration = ParleyConfiguration(
                server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
                keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
                destinations: [
                    try DestinationSpec(name: "a", url: "https://a.example", basic: .init()).validated(),
                    try DestinationSpec(name: "b", url: "https://b.example", basic: .init()).validated(),
                ])
            let dependencies = ParleyDependencies.inMemory(
                transport: FakeTransport { [upstream] in upstream.answer($0) }, registrations: registrations, cookies: cookies, tokens: tokens,
                audit: audit)
            let app = try buildApplication(configuration: configuration, dependencies: dependencies, logger: quietLogger)
            try await app.test(.router) { client in try await body(client) }
        }

        /// A registration through the API, given a user, with a token row and (after one
        /// proxied call) a cookie jar; returns (id, client token).
        func register(
            _ client: any TestClientProtocol, _ destination: String, user: RegistrationUser?, name: String
        ) async throws -> (UUID, String) {
            let (idText, token) = try await RouterTests.register(client, destination: destination)
            let id = try #require(UUID(uuidString: idText))
            if let user { #expect(try await registrations.setUser(id: id, user: user)) }
            let key = TokenKey(destination: destination, registrationID: idText, scopeKey: "https://\(destination).example/\(name)")
            try await tokens.exclusively(key) {
                try await $0.save(StoredToken(accessToken: "at-\(name)", refreshToken: nil, expiresAt: nil), for: key, grant: .password)
            }
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: [.authorization: "Bearer \(token)"]).status == .ok)
            #expect(try await cookies.cookies(registrationID: idText).count == 1)
            return (id, token)
        }

        func holds(_ id: UUID) async throws -> (tokens: Int, cookies: Int) {
            let text = id.uuidString.lowercased()
            return (try await tokens.tokens(registrationID: id).count, try await cookies.cookies(registrationID: text).count)
        }
    }

    static func verified(_ subject: String, issuer: String = idp) -> RegistrationUser {
        RegistrationUser(issuer: issuer, subject: subject, verified: true, match: subject)
    }

    static func list(_ client: any TestClientProtocol, _ query: String) async throws -> [String] {
        try await client.execute(uri: "/admin/v1/registrations?\(query)", method: .get, headers: admin) { response in
            #expect(response.status == .ok, "\(query)")
            return (RouterTests.json(response.body)["items"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }.sorted()
        }
    }

    static func revoke(_ client: any TestClientProtocol, _ body: String) async throws -> TestResponse {
        try await client.execute(uri: "/admin/v1/revocations", method: .post, headers: admin, body: ByteBuffer(string: body))
    }

    @Test func theListFiltersByIssuerAndSubject() async throws {
        let f = Fixture()
        try await f.run { client in
            let (aliceA, _) = try await f.register(client, "a", user: Self.verified("alice"), name: "1")
            let (aliceB, _) = try await f.register(client, "b", user: Self.verified("alice"), name: "2")
            let (bob, _) = try await f.register(client, "a", user: Self.verified("bob"), name: "3")
            let (otherAlice, _) = try await f.register(client, "b", user: Self.verified("alice", issuer: "https://as.example"), name: "4")
            let (nobody, _) = try await f.register(client, "a", user: nil, name: "5")
            func ids(_ list: UUID...) -> [String] { list.map { $0.uuidString.lowercased() }.sorted() }
            #expect(try await Self.list(client, "issuer=https%3A%2F%2Fidp.example&subject=alice") == ids(aliceA, aliceB))
            #expect(try await Self.list(client, "subject=alice") == ids(aliceA, aliceB, otherAlice))
            #expect(try await Self.list(client, "issuer=https%3A%2F%2Fidp.example") == ids(aliceA, aliceB, bob))
            #expect(try await Self.list(client, "issuer=https%3A%2F%2Fidp.example&subject=alice&destination=b") == ids(aliceB))
            #expect(try await Self.list(client, "subject=carol").isEmpty)
            #expect(try await Self.list(client, "").count == 5)
            _ = nobody
            for bad in ["issuer=", "subject=a%01b", "issuer=" + String(repeating: "x", count: 2049)] {
                RouterTests.expectProblem(
                    try await client.execute(uri: "/admin/v1/registrations?\(bad)", method: .get, headers: Self.admin), .badRequest, "invalid_request")
            }
        }
    }

    @Test func aRevocationByUserRemovesEveryRegistrationOfThatUserOnEveryDestination() async throws {
        let f = Fixture()
        try await f.run { client in
            let (aliceA, tokenA) = try await f.register(client, "a", user: Self.verified("alice"), name: "1")
            let (aliceB, tokenB) = try await f.register(client, "b", user: Self.verified("alice"), name: "2")
            let (bob, _) = try await f.register(client, "a", user: Self.verified("bob"), name: "3")
            let (otherAlice, _) = try await f.register(client, "b", user: Self.verified("alice", issuer: "https://as.example"), name: "4")
            let (hinted, _) = try await f.register(client, "a", user: nil, name: "5")

            let response = try await Self.revoke(client, #"{"user":{"issuer":"https://idp.example","subject":"alice"}}"#)
            #expect(response.status == .ok)
            #expect(RouterTests.json(response.body)["revoked"] as? Int == 4, "two token rows and two cookie jars")
            for id in [aliceA, aliceB] { #expect(try await f.holds(id) == (0, 0)) }
            for id in [bob, otherAlice, hinted] { #expect(try await f.holds(id) == (1, 1)) }
            // The registrations stay; their next calls open new sessions without the old cookie.
            let before = f.upstream.cookies.withLock { $0.count }
            for token in [tokenA, tokenB] {
                #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: [.authorization: "Bearer \(token)"]).status == .ok)
            }
            #expect(f.upstream.cookies.withLock { Array($0[before...]) } == ["", ""], "a revoked session cookie was sent")
            let event = try #require(f.audit.events.last { $0.action == "admin.revocation" })
            #expect(event.detail["userIssuer"] == Self.idp && event.detail["userSubject"] == "alice" && event.detail["revoked"] == "4")
            // Nothing left of alice: a second revocation removes nothing.
            let again = try await Self.revoke(client, #"{"user":{"issuer":"https://idp.example","subject":"alice"}}"#)
            #expect(RouterTests.json(again.body)["revoked"] as? Int == 2, "the sessions the calls above opened")
        }
    }

    @Test func theOtherFiltersNarrowARevocationByUser() async throws {
        let f = Fixture()
        try await f.run { client in
            let (aliceA, _) = try await f.register(client, "a", user: Self.verified("alice"), name: "1")
            let (aliceB, _) = try await f.register(client, "b", user: Self.verified("alice"), name: "2")
            let response = try await Self.revoke(client, #"{"user":{"issuer":"https://idp.example","subject":"alice"},"destination":"b"}"#)
            #expect(RouterTests.json(response.body)["revoked"] as? Int == 2)
            #expect(try await f.holds(aliceA) == (1, 1))
            #expect(try await f.holds(aliceB) == (0, 0))
            // A registration id that is not the user's: nothing.
            let mismatch = try await Self.revoke(
                client, #"{"user":{"issuer":"https://idp.example","subject":"bob"},"registrationId":"\#(aliceA.uuidString)"}"#)
            #expect(RouterTests.json(mismatch.body)["revoked"] as? Int == 0)
            #expect(try await f.holds(aliceA) == (1, 1))
        }
    }

    @Test func aUserMustNameIssuerAndSubject() async throws {
        let f = Fixture()
        try await f.run { client in
            for body in [
                #"{"user":{"issuer":"https://idp.example"}}"#, #"{"user":{"subject":"alice"}}"#, #"{"user":{"issuer":"","subject":"alice"}}"#,
                #"{"user":{"issuer":"https://idp.example","subject":"a\u0001"}}"#, #"{"user":"alice"}"#, #"{"user":{"issuer":1,"subject":"a"}}"#,
            ] {
                RouterTests.expectProblem(try await Self.revoke(client, body), .badRequest, "invalid_request")
            }
            // `null` is no filter at all: a revocation of everything.
            let everything = try await Self.revoke(client, #"{"user":null}"#)
            RouterTests.expectProblem(everything, .badRequest, "invalid_request")
            #expect((RouterTests.json(everything.body)["detail"] as? String)?.contains("user") == true)
        }
    }
}
