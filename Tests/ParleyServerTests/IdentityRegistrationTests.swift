import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyCrypto
import ParleyEncoding
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// `POST /v1/registrations` with `identityToken`: a valid one makes the registration's user
/// verified, an invalid one is `401 invalid_identity_token` and creates nothing, and a
/// destination that requires verified users refuses a registration without one (`403`).
@Suite struct IdentityRegistrationRouterTests {
    static let issuer = "https://idp.example"
    static let jwks = "https://idp.example/keys"

    /// The identity provider, the repositories and the application over them.
    struct Fixture: Sendable {
        let signer: IdentityIssuer
        let clock: TestClock
        let registrations: InMemoryRegistrations
        let audit: InMemoryAudit
        let dependencies: ParleyDependencies

        init() throws {
            let signer = try IdentityIssuer()
            self.signer = signer
            let transport = FakeTransport { request in
                request.url == IdentityRegistrationRouterTests.jwks ? .text(200, String(decoding: signer.jwks, as: UTF8.self)) : .text(404)
            }
            clock = TestClock()
            var dependencies = ParleyDependencies.inMemory(transport: transport, clock: clock)
            registrations = try #require(dependencies.registrations as? InMemoryRegistrations)
            audit = try #require(dependencies.audit as? InMemoryAudit)
            dependencies.registrations = registrations
            self.dependencies = dependencies
        }

        static func configuration() throws -> ParleyConfiguration {
            var open = DestinationSpec(name: "open", url: "https://open.example", basic: .init())
            open.identity = .init(match: "email")
            var strict = DestinationSpec(name: "strict", url: "https://strict.example", basic: .init())
            strict.registration = .init(identity: "required")
            return ParleyConfiguration(
                server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
                keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
                destinations: [try open.validated(), try strict.validated()],
                identityProviders: [IdentityProvider(issuer: IdentityRegistrationRouterTests.issuer, jwksURI: IdentityRegistrationRouterTests.jwks, audiences: ["parley"])])
        }

        func claims(_ changes: [String: Any] = [:]) -> [String: Any] {
            let now = Int(clock.now.timeIntervalSince1970)
            var claims: [String: Any] = [
                "iss": IdentityRegistrationRouterTests.issuer, "sub": "u-4711", "aud": "parley", "exp": now + 300, "email": "Alice@Example.com",
                "email_verified": true, "iat": now,
            ]
            for (name, value) in changes { claims[name] = value is NSNull ? nil : value }
            return claims
        }

        func token(_ changes: [String: Any] = [:], algorithm: IdentityIssuer.Algorithm = .rs256) throws -> String {
            try signer.token(claims(changes), algorithm: algorithm)
        }

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            let app = try buildApplication(configuration: try Self.configuration(), dependencies: dependencies, logger: quietLogger)
            try await app.test(.router) { client in try await body(client) }
        }
    }

    static func register(_ client: any TestClientProtocol, _ object: [String: Any]) async throws -> TestResponse {
        try await client.execute(
            uri: "/v1/registrations", method: .post, headers: [.contentType: "application/json"], body: RouterTests.body(object))
    }

    @Test func aValidTokenMakesAVerifiedUser() async throws {
        let f = try Fixture()
        try await f.run { client in
            let response = try await Self.register(client, ["destination": "open", "identityToken": try f.token(algorithm: .es256)])
            #expect(response.status == .created)
            let object = RouterTests.json(response.body)
            let user = try #require(object["user"] as? [String: Any])
            #expect(user["issuer"] as? String == Self.issuer && user["subject"] as? String == "u-4711" && user["verified"] as? Bool == true)
            #expect(user.count == 3, "issuer, subject and verified only")
            // Stored with the lower-cased value of the destination's identity.match claim.
            let stored = try #require(f.registrations.all.first)
            #expect(stored.user == RegistrationUser(issuer: Self.issuer, subject: "u-4711", verified: true, match: "alice@example.com"))
            #expect(stored.user?.match == "alice@example.com")
            // The registration itself and administrators see the same user.
            let token = try #require(object["clientToken"] as? String)
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: [.authorization: "Bearer \(token)"]) { me in
                #expect((RouterTests.json(me.body)["user"] as? [String: Any])?["subject"] as? String == "u-4711")
            }
            try await client.execute(
                uri: "/admin/v1/registrations/\(stored.idString)", method: .get, headers: [.authorization: "Bearer \(RouterTests.adminToken)"]
            ) { admin in
                #expect((RouterTests.json(admin.body)["user"] as? [String: Any])?["verified"] as? Bool == true)
            }
            #expect(f.audit.events.contains { $0.action == "registration.created" })
        }
    }

    @Test func withoutATokenTheUserIsAnExplicitNull() async throws {
        let f = try Fixture()
        try await f.run { client in
            let response = try await Self.register(client, ["destination": "open"])
            #expect(response.status == .created)
            #expect(String(buffer: response.body).contains(#""user":null"#))
            #expect(f.registrations.all.first?.user == nil)
        }
    }

    @Test func aDestinationThatRequiresVerifiedUsersRefusesARegistrationWithoutAToken() async throws {
        let f = try Fixture()
        try await f.run { client in
            let response = try await Self.register(client, ["destination": "strict", "userHint": "alice"])
            RouterTests.expectProblem(response, .forbidden, "forbidden")
            #expect((RouterTests.json(response.body)["detail"] as? String)?.contains("identityToken") == true)
            #expect(f.registrations.all.isEmpty)
            #expect(f.audit.events.contains { $0.action == "registration.refused" && $0.detail["identity"] == "missing" })
            // With a token it registers; the match claim defaults to sub.
            let accepted = try await Self.register(client, ["destination": "strict", "identityToken": try f.token()])
            #expect(accepted.status == .created)
            #expect(f.registrations.all.first?.user?.match == "u-4711")
        }
    }

    /// Every refusal: `401 invalid_identity_token`, a detail naming the check, never the token,
    /// and nothing created.
    @Test func anInvalidTokenIsRefusedAndCreatesNothing() async throws {
        let f = try Fixture()
        let now = Int(f.clock.now.timeIntervalSince1970)
        let good = try f.token()
        let parts = good.split(separator: ".").map(String.init)
        let hmacInput = IdentityIssuer.encode(["alg": "HS256", "kid": IdentityIssuer.rsaKeyID]) + "." + parts[1]
        let cases: [(String, String, String)] = [
            ("expired", try f.token(["exp": now - 120]), "expired"),
            ("not yet valid", try f.token(["nbf": now + 120]), "not valid yet"),
            ("wrong audience", try f.token(["aud": "someone-else"]), "audience"),
            ("unknown issuer", try f.token(["iss": "https://evil.example"]), "issuer"),
            ("unknown kid", try f.signer.token(f.claims(), header: ["kid": "gone"]), "key"),
            ("bad signature", parts[0] + "." + IdentityIssuer.encode(f.claims(["sub": "mallory"])) + "." + parts[2], "signature"),
            ("alg none", IdentityIssuer.encode(["alg": "none"]) + "." + parts[1] + ".", "algorithm"),
            (
                "HS256 with the public key",
                hmacInput + "." + Base64URL.encode(HMACSHA256.authenticate(Array(hmacInput.utf8), key: Array(f.signer.rsaPublicKeyPEM.utf8))),
                "algorithm"
            ),
            ("truncated", String(good.dropLast(4)), "signature"),
            ("40 KiB", try f.token(["pad": String(repeating: "x", count: 40 * 1024)]), "larger than"),
            ("garbage", "not-a-jwt", "compact JWS"),
            ("empty", "", "compact JWS"),
            ("no email for identity.match", try f.token(["email": NSNull()]), "'email'"),
            // An email match needs the provider to say the address is verified.
            ("unverified email", try f.token(["email_verified": false]), "not verified"),
            ("email_verified absent", try f.token(["email_verified": NSNull()]), "not verified"),
        ]
        try await f.run { client in
            for (name, token, words) in cases {
                let response = try await Self.register(client, ["destination": "open", "identityToken": token])
                RouterTests.expectProblem(response, .unauthorized, "invalid_identity_token")
                let text = String(buffer: response.body)
                let detail = RouterTests.json(response.body)["detail"] as? String ?? ""
                #expect(detail.contains(words), "\(name): \(detail)")
                for part in token.split(separator: ".") where part.count >= 8 {
                    #expect(!text.contains(part), "\(name): the answer echoes the token")
                }
            }
            #expect(f.registrations.all.isEmpty)
            let refusals = f.audit.events.filter { $0.action == "registration.refused" }
            #expect(refusals.count == cases.count)
            #expect(refusals.allSatisfy { event in event.detail.values.allSatisfy { value in !cases.contains { $0.1.count > 8 && value.contains($0.1) } } })
        }
    }

    @Test func anIdentityTokenThatIsNotAStringIsAnInvalidRequest() async throws {
        let f = try Fixture()
        try await f.run { client in
            RouterTests.expectProblem(try await Self.register(client, ["destination": "open", "identityToken": 7]), .badRequest, "invalid_request")
            #expect(f.registrations.all.isEmpty)
        }
    }

    @Test func theInMemoryTwinSetsAUserOnce() async throws {
        let registrations = InMemoryRegistrations()
        let record = RegistrationRecord(
            id: UUID(), destination: "open", status: .active, deviceType: nil, deviceModel: nil, userHint: nil, returnUrl: nil,
            credentialsSealed: nil, clientCertificateSealed: nil, createdAt: Date())
        try await registrations.insert(record, clientTokenHash: [1])
        let first = RegistrationUser(issuer: "https://as.example", subject: "alice", verified: false, match: "Alice")
        #expect(try await registrations.setUser(id: record.id, user: first))
        #expect(!(try await registrations.setUser(id: record.id, user: RegistrationUser(issuer: "x", subject: "bob", verified: false, match: "bob"))))
        #expect(!(try await registrations.setUser(id: UUID(), user: first)))
        #expect(try await registrations.find(id: record.id)?.user == first)
    }
}

/// The registration's user in PostgreSQL: stored with the row, set once by `setUser`.
@Suite struct RegistrationUserStoreTests {
    @Test func aUserIsStoredAndSetOnlyWhereThereIsNone() async throws {
        let postgres = try await PostgresServer.shared()
        let url = try await postgres.createDatabase()
        try await withPostgresStore(StoreConfiguration(connectionString: url, maxConnections: 2)) { store in
            _ = try await Migrator(store: store, source: .embedded(EmbeddedMigrations.files), logger: quietLogger).migrate()
            let registrations = PostgresRegistrations(store: store)
            func record(_ user: RegistrationUser?) -> RegistrationRecord {
                RegistrationRecord(
                    id: UUID(), destination: "d", status: .active, deviceType: nil, deviceModel: nil, userHint: nil, returnUrl: nil,
                    credentialsSealed: nil, clientCertificateSealed: nil, createdAt: Date(), user: user)
            }
            let verified = RegistrationUser(issuer: "https://idp.example", subject: "u-1", verified: true, match: "Alice@Example.com")
            let withUser = record(verified)
            try await registrations.insert(withUser, clientTokenHash: Array(SecureRandom.bytes(32)))
            #expect(try await registrations.find(id: withUser.id)?.user == verified)
            #expect(!(try await registrations.setUser(id: withUser.id, user: RegistrationUser(issuer: "x", subject: "y", verified: false, match: "y"))))
            #expect(try await registrations.find(id: withUser.id)?.user == verified)

            let without = record(nil)
            try await registrations.insert(without, clientTokenHash: Array(SecureRandom.bytes(32)))
            #expect(try await registrations.find(id: without.id)?.user == nil)
            let firstSignIn = RegistrationUser(issuer: "https://as.example", subject: "bob", verified: false, match: "BOB")
            #expect(try await registrations.setUser(id: without.id, user: firstSignIn))
            #expect(!(try await registrations.setUser(id: without.id, user: verified)))
            let stored = try await registrations.find(id: without.id)?.user
            #expect(stored == firstSignIn && stored?.match == "bob")
            // The columns are all set or all NULL.
            await #expect(throws: (any Error).self) {
                try await store.execute("UPDATE registrations SET user_match = NULL WHERE id = \(without.id)")
            }
        }
    }
}
