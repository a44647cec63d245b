import Foundation
import ParleyCrypto
import ParleyEncoding
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Verified users end to end: the real `parley` binary, a destinations file that lists the
/// simulator's demo identity provider, tokens the simulator mints, PostgreSQL.
@Suite(.serialized) struct IdentityTokenLiveTests {
    static let keys = "k1:" + Data(repeating: 5, count: 32).base64EncodedString()
    static let adminToken = "admin-token-identity-0001-0123456789abcdefghijk"

    static func destinationsFile(simulatorPort: Int) throws -> String {
        let sim = "http://127.0.0.1:\(simulatorPort)"
        return try ScratchFile.write(
            """
            identityProviders:
              - issuer: \(sim)
                jwksUri: \(sim)/idp/jwks
                audiences: [parley]
            destinations:
              - name: open
                url: \(sim)
                basic: {}
                identity: { match: email }
              - name: strict
                url: \(sim)
                basic: {}
                registration: { identity: required }
            """, suffix: ".yaml")
    }

    static func mint(_ simulatorPort: Int, _ object: [String: Any]) async throws -> String {
        let response = try await RawHTTP.request(
            port: simulatorPort, method: "POST", target: "/control/identity-token", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
        guard response.status == 200, let token = response.json?["token"] as? String else {
            throw RawHTTPError(description: "the simulator did not mint a token: \(response.status) \(response.text)")
        }
        return token
    }

    static func register(_ parley: ParleyProcess, _ object: [String: Any]) async throws -> RawHTTPResponse {
        try await RawHTTP.request(
            port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    @Test func aTokenTheListedProviderMintedMakesAVerifiedUserAndEveryBadOneIsRefused() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let env = [
                "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys,
                "PARLEY_DESTINATIONS": try Self.destinationsFile(simulatorPort: simulatorPort), "PARLEY_LOG_LEVEL": "info",
                "PARLEY_ADMIN_TOKENS": Self.adminToken, "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
            ]
            let parley = try await ParleyProcess.start(environment: env)
            defer { Task { await parley.stop() } }
            let issuer = "http://127.0.0.1:\(simulatorPort)"
            let now = Int(Date().timeIntervalSince1970)

            // A verified user.
            let token = try await Self.mint(
                simulatorPort, ["sub": "alice-1", "aud": "parley", "email": "Alice@Example.com", "jsonClaims": ["email_verified": true]])
            let created = try await Self.register(
                parley, ["destination": "open", "identityToken": token, "credentials": ["username": "alice", "password": "wonderland"]])
            #expect(created.status == 201, "\(created.text)")
            let user = try #require(created.json?["user"] as? [String: Any])
            #expect(user["verified"] as? Bool == true && user["subject"] as? String == "alice-1" && user["issuer"] as? String == issuer)
            let clientToken = try #require(created.json?["clientToken"] as? String)
            #expect(
                try await RawHTTP.request(port: parley.port, method: "GET", target: "/v1/proxy/api/data", headers: [("Authorization", "Bearer \(clientToken)")])
                    .status == 200)
            #expect(simulator.requests(route: "GET /idp/jwks") == 1)

            // A destination that requires verified users: 403 without a token, 201 with one (ES256 this time).
            let refused = try await Self.register(parley, ["destination": "strict"])
            #expect(refused.status == 403 && refused.json?["code"] as? String == "forbidden")
            let es256 = try await Self.mint(simulatorPort, ["sub": "alice-1", "aud": "parley", "alg": "ES256"])
            let strict = try await Self.register(parley, ["destination": "strict", "identityToken": es256])
            #expect(strict.status == 201, "\(strict.text)")
            #expect((strict.json?["user"] as? [String: Any])?["verified"] as? Bool == true)

            // Administrators find both by user.
            let listed = try await RawHTTP.request(
                port: parley.port, method: "GET",
                target: "/admin/v1/registrations?subject=alice-1&issuer=" + (PercentEncoding.encodeFormComponent(issuer)),
                headers: [("Authorization", "Bearer \(Self.adminToken)")])
            #expect((listed.json?["items"] as? [Any])?.count == 2)

            // Every bad token: 401 invalid_identity_token, and nothing is created.
            let counted = try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                try await store.query("SELECT count(*) AS n FROM registrations")[0].int("n")
            }
            let good = token.split(separator: ".").map(String.init)
            let stranger = try IdentityIssuer()
            let jwks = try await RawHTTP.request(port: simulatorPort, method: "GET", target: "/idp/jwks").body
            let hmacInput = IdentityIssuer.encode(["alg": "HS256", "kid": IdentityIssuer.rsaKeyID]) + "." + good[1]
            let bad: [(String, String)] = [
                ("expired", try await Self.mint(simulatorPort, ["sub": "a", "aud": "parley", "exp": now - 120])),
                ("not yet valid", try await Self.mint(simulatorPort, ["sub": "a", "aud": "parley", "nbf": now + 600, "exp": now + 1200])),
                ("wrong audience", try await Self.mint(simulatorPort, ["sub": "a", "aud": "someone-else"])),
                ("unknown issuer", try await Self.mint(simulatorPort, ["sub": "a", "aud": "parley", "iss": "https://evil.example"])),
                ("unknown kid", try stranger.token(["iss": issuer, "sub": "a", "aud": "parley", "exp": now + 600], header: ["kid": "gone-1"])),
                ("bad signature", try stranger.token(["iss": issuer, "sub": "a", "aud": "parley", "exp": now + 600])),
                ("alg none", IdentityIssuer.encode(["alg": "none", "typ": "JWT"]) + "." + good[1] + "."),
                ("HS256 with the public key", hmacInput + "." + Base64URL.encode(HMACSHA256.authenticate(Array(hmacInput.utf8), key: jwks))),
                ("truncated", String(token.dropLast(6))),
                ("40 KiB", try await Self.mint(simulatorPort, ["sub": "a", "aud": "parley", "claims": ["pad": String(repeating: "x", count: 40 * 1024)]])),
            ]
            for (name, value) in bad {
                let response = try await Self.register(parley, ["destination": "open", "identityToken": value])
                #expect(response.status == 401 && response.json?["code"] as? String == "invalid_identity_token", "\(name): \(response.status)")
                #expect(!response.text.contains(String(value.suffix(20))), "\(name): the answer echoes the token")
            }
            let after = try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                try await store.query("SELECT count(*) AS n FROM registrations")[0].int("n")
            }
            #expect(after == counted, "a refused token created a registration")
            // One fetch at the first token; the unknown kid refetched at most once since.
            #expect(simulator.requests(route: "GET /idp/jwks") <= 2)
            #expect(!parley.log.contains(token) && !parley.log.contains(es256), "an identity token was logged")
            await parley.stop()
        }
    }
}
