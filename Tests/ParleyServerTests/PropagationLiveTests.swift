import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Principal propagation end to end: the real `parley` binary, PostgreSQL, and the simulator's
/// authorization server checking RFC 8693 token exchanges and RFC 7523 JWT bearer assertions
/// (signed by the demo identity provider, or by Parley's own keys once the server trusts
/// Parley's published JWK Set). A verified registration reaches the upstream through each grant
/// with no browser at all; the negatives are refused where a real server refuses them.
@Suite(.serialized) struct PropagationLiveTests {
    static let keys = "k1:" + Data(repeating: 7, count: 32).base64EncodedString()

    /// The simulator's demo identity provider as the destinations file lists it (`audiences: [parley]`).
    static func simulatorIdentityProvider(_ sim: String, indent: String = "") -> String {
        [
            "identityProviders:", "  - issuer: \(sim)", "    jwksUri: \(sim)/idp/jwks", "    audiences: [parley]",
        ].map { indent + $0 }.joined(separator: "\n")
    }

    static func destinationsFile(_ sim: String) throws -> String {
        let client = """
                  tokenEndpoint: \(sim)/oauth/token
                  clientId: parley-confidential
                  clientSecret: s3cret
            """
        return try ScratchFile.write(
            """
            \(simulatorIdentityProvider(sim))
            destinations:
              - name: exchange
                url: \(sim)
                registration: { identity: required }
                oauth2:
                  grant: token_exchange
                  audience: https://backend.example
                  subjectTokenType: id_token
            \(client)
              - name: bearer-id
                url: \(sim)
                registration: { identity: required }
                oauth2:
                  grant: jwt_bearer
                  assertion: identity_token
            \(client)
              - name: bearer-parley
                url: \(sim)
                registration: { identity: required }
                oauth2:
                  grant: jwt_bearer
                  assertion: parley
                  subjectClaim: email
            \(client)
              - name: saml-bearer
                url: \(sim)
                registration: { identity: required }
                oauth2:
                  grant: saml2_bearer
                  samlAudience: \(sim)
                  nameIdClaim: email
                  nameIdFormat: urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress
            \(client)
              - name: saml-elsewhere
                url: \(sim)
                registration: { identity: required }
                oauth2:
                  grant: saml2_bearer
                  samlAudience: https://another-server.example
            \(client)
            """, suffix: ".yaml")
    }

    static func register(_ parley: ParleyProcess, _ destination: String, _ identityToken: String) async throws -> String {
        let created = try await RawHTTP.request(
            port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: ["destination": destination, "identityToken": identityToken])))
        guard created.status == 201, let token = created.json?["clientToken"] as? String else {
            throw RawHTTPError(description: "registration with \(destination) answered \(created.status): \(created.text)")
        }
        return token
    }

    static func call(_ parley: ParleyProcess, _ clientToken: String) async throws -> RawHTTPResponse {
        try await RawHTTP.request(
            port: parley.port, method: "GET", target: "/v1/proxy/oauth-api/orders", headers: [("Authorization", "Bearer \(clientToken)")])
    }

    static func renew(_ parley: ParleyProcess, _ clientToken: String, _ identityToken: String) async throws -> RawHTTPResponse {
        try await RawHTTP.request(
            port: parley.port, method: "PUT", target: "/v1/registrations/me/identity",
            headers: [("Authorization", "Bearer \(clientToken)"), ("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: ["identityToken": identityToken])))
    }

    @Test func aVerifiedUserReachesTheUpstreamThroughEachGrantWithoutABrowser() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let signing = try TestSigningKeys.generate()
        defer { signing.remove() }
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            let parley = try await ParleyProcess.start(environment: [
                "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys, "PARLEY_DESTINATIONS": try Self.destinationsFile(sim),
                "PARLEY_SIGNING_KEYS": "s1:\(signing.rsaKeyWithCertificatePath),s2:\(signing.ecKeyPath)", "PARLEY_LOG_LEVEL": "debug",
                "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
            ])
            defer { Task { await parley.stop() } }
            let now = Int(Date().timeIntervalSince1970)
            var minted: [String] = []
            func mint(_ claims: [String: Any]) async throws -> String {
                let token = try await IdentityTokenLiveTests.mint(simulatorPort, claims)
                minted.append(token)
                return token
            }

            // RFC 8693: the identity token is the subject token; the audience reaches the server.
            let exchange = try await Self.register(parley, "exchange", try await mint(["sub": "alice-1", "aud": "parley"]))
            let exchanged = try await Self.call(parley, exchange)
            #expect(exchanged.status == 200, "\(exchanged.text)")
            #expect(exchanged.json?["sub"] as? String == "alice-1")
            #expect(exchanged.json?["grant"] as? String == "token_exchange")
            #expect(exchanged.json?["aud"] as? String == "https://backend.example")
            // A token the server no longer accepts is exchanged again, with no person involved.
            _ = try await RawHTTP.request(port: simulatorPort, method: "POST", target: "/sim/oauth/expire-access-tokens")
            #expect(try await Self.call(parley, exchange).status == 200)
            #expect(simulator.oauth.tokenCallsByGrant["urn:ietf:params:oauth:grant-type:token-exchange"] == 2)

            // RFC 7523 with the identity token as the assertion: the provider issued it for this
            // server too (its aud names the token endpoint), as a real server requires.
            let forBoth = try await mint(["sub": "alice-1", "aud": ["parley", sim + "/oauth/token"]])
            let bearerID = try await Self.register(parley, "bearer-id", forBoth)
            let viaID = try await Self.call(parley, bearerID)
            #expect(viaID.status == 200 && viaID.json?["grant"] as? String == "jwt_bearer", "\(viaID.text)")
            #expect(viaID.json?["sub"] as? String == "alice-1")
            // An assertion for another audience: the server refuses it, and so does Parley's answer.
            let otherAudience = try await Self.register(parley, "bearer-id", try await mint(["sub": "alice-1", "aud": "parley"]))
            let refused = try await Self.call(parley, otherAudience)
            #expect(refused.status == 403 && refused.json?["code"] as? String == "upstream_unauthorized", "\(refused.text)")

            // RFC 7523 with Parley's own assertion: refused until the server trusts Parley's keys,
            // which Parley publishes (both; the first signs).
            let bearerParley = try await Self.register(
                parley, "bearer-parley", try await mint(["sub": "alice-1", "aud": "parley", "email": "alice@example.com"]))
            #expect(try await Self.call(parley, bearerParley).status == 403)
            let jwks = try await RawHTTP.request(port: parley.port, method: "GET", target: "/.well-known/jwks.json")
            #expect(jwks.status == 200 && jwks.header("Content-Type") == "application/jwk-set+json")
            let kids = ((jwks.json?["keys"] as? [[String: Any]]) ?? []).compactMap { $0["kid"] as? String }
            #expect(kids == ["s1", "s2"])
            #expect(!jwks.text.contains("\"d\""), "a private key member was published")
            let trusted = try await RawHTTP.request(port: simulatorPort, method: "POST", target: "/sim/oauth/trust-jwks", body: jwks.body)
            #expect(trusted.status == 200)
            let viaParley = try await Self.call(parley, bearerParley)
            #expect(viaParley.status == 200 && viaParley.json?["grant"] as? String == "jwt_bearer", "\(viaParley.text)")
            #expect(viaParley.json?["sub"] as? String == "alice@example.com", "the assertion's sub is the subjectClaim")
            // Another implementation agrees: Authlib's JOSE verifies Parley's assertion with the published keys.
            let scratch = NSTemporaryDirectory() + "parley-propagation-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: scratch) }
            let verifier = packageRoot + "/Tests/Fixtures/propagation/verify.py"
            try Data(jwks.body).write(to: URL(fileURLWithPath: scratch + "/jwks.json"))
            let jwtAssertion = try #require(simulator.oauth.lastAssertion(grant: "jwt_bearer"))
            try Data(jwtAssertion.utf8).write(to: URL(fileURLWithPath: scratch + "/assertion.jwt"))
            #expect(throws: Never.self) {
                try ExternalCheck.run(
                    verifier, ["jwt", scratch + "/assertion.jwt", scratch + "/jwks.json", "http://127.0.0.1:\(parley.port)", sim + "/oauth/token", "alice@example.com"])
            }

            // RFC 7522: a SAML 2.0 assertion Parley signs (XML signature, libxmlsec1), refused until
            // the server imports Parley's SAML metadata, then the NameID is the user's e-mail.
            // alice signed in at her identity provider two minutes ago: the assertion says so.
            let signedInAt = Date().timeIntervalSince1970.rounded(.down) - 120
            let samlBearer = try await Self.register(
                parley, "saml-bearer", try await mint(["sub": "alice-1", "aud": "parley", "email": "alice@example.com", "iat": signedInAt]))
            #expect(try await Self.call(parley, samlBearer).status == 403)
            let metadata = try await RawHTTP.request(port: parley.port, method: "GET", target: "/.well-known/saml-metadata.xml")
            #expect(metadata.status == 200 && metadata.header("Content-Type") == "application/samlmetadata+xml")
            #expect(metadata.text.contains("entityID=\"http://127.0.0.1:\(parley.port)\"") && metadata.text.contains("X509Certificate>"))
            #expect(!metadata.text.contains("PRIVATE"), "the metadata carries a private key")
            let imported = try await RawHTTP.request(
                port: simulatorPort, method: "POST", target: "/sim/oauth/trust-saml-metadata", body: metadata.body)
            #expect(imported.status == 200, "\(imported.text)")
            let viaSAML = try await Self.call(parley, samlBearer)
            #expect(viaSAML.status == 200 && viaSAML.json?["grant"] as? String == "saml2_bearer", "\(viaSAML.text)")
            #expect(viaSAML.json?["sub"] as? String == "alice@example.com")
            let assertionXML = try #require(simulator.oauth.lastAssertion(grant: "saml2_bearer"))
            let instant = Date(timeIntervalSince1970: signedInAt).formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
            #expect(assertionXML.contains("AuthnInstant=\"\(instant)\""), "AuthnInstant is not when alice signed in (\(instant))")
            // xmlsec1 verifies its signature with the metadata's certificate; pysaml2 reads what it says.
            try Data(metadata.body).write(to: URL(fileURLWithPath: scratch + "/metadata.xml"))
            try Data(try #require(simulator.oauth.lastAssertion(grant: "saml2_bearer")).utf8).write(to: URL(fileURLWithPath: scratch + "/assertion.xml"))
            #expect(throws: Never.self) {
                try ExternalCheck.run(
                    verifier, ["saml", scratch + "/assertion.xml", scratch + "/metadata.xml", "http://127.0.0.1:\(parley.port)", sim, sim + "/oauth/token", "alice@example.com"])
            }
            // An assertion for another audience, signed by a trusted key: refused by the server.
            let elsewhere = try await Self.register(
                parley, "saml-elsewhere", try await mint(["sub": "alice-1", "aud": "parley", "email": "alice@example.com"]))
            let notForUs = try await Self.call(parley, elsewhere)
            #expect(notForUs.status == 403 && notForUs.json?["code"] as? String == "upstream_unauthorized", "\(notForUs.text)")

            // An identity token past its expiry (within the 60 s skew registration allows): no
            // exchange is attempted; the client is told to renew it, and after renewal it works.
            let calls = simulator.oauth.tokenCalls
            let stale = try await Self.register(parley, "exchange", try await mint(["sub": "bob", "aud": "parley", "exp": now - 20]))
            let expired = try await Self.call(parley, stale)
            #expect(expired.status == 401 && expired.json?["code"] as? String == "invalid_identity_token", "\(expired.text)")
            #expect((expired.json?["detail"] as? String)?.contains("PUT /v1/registrations/me/identity") == true)
            #expect(simulator.oauth.tokenCalls == calls, "an expired identity token was sent to the authorization server")
            let another = try await Self.renew(parley, stale, try await mint(["sub": "mallory", "aud": "parley"]))
            #expect(another.status == 403 && another.json?["code"] as? String == "forbidden", "\(another.text)")
            let garbage = try await Self.renew(parley, stale, "not.a.token")
            #expect(garbage.status == 401 && garbage.json?["code"] as? String == "invalid_identity_token")
            let renewed = try await Self.renew(parley, stale, try await mint(["sub": "bob", "aud": "parley"]))
            #expect(renewed.status == 200 && (renewed.json?["user"] as? [String: Any])?["subject"] as? String == "bob", "\(renewed.text)")
            let afterRenewal = try await Self.call(parley, stale)
            #expect(afterRenewal.status == 200 && afterRenewal.json?["sub"] as? String == "bob", "\(afterRenewal.text)")

            // The identity token is sealed at rest and never logged.
            let stored = try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                try await store.query("SELECT identity_token_sealed FROM registrations WHERE identity_token_sealed IS NOT NULL")
                    .map { String(decoding: try $0.bytes("identity_token_sealed"), as: UTF8.self) }
            }
            #expect(stored.count == 7)
            for token in minted {
                #expect(!stored.contains { $0.contains(token.prefix(40)) }, "an identity token is stored in the clear")
                #expect(!parley.log.contains(token), "an identity token was logged")
            }
            await parley.stop()
        }
    }

    /// RFC 7523 against Authlib's own authorization server (PyPI authlib, `JWTBearerGrant`), set
    /// up as a deployment trusts a client that signs its assertions: the client is Parley's
    /// issuer, its keys come from Parley's published JWK Set, the audience must be the token
    /// endpoint. Parley's assertion gets a token and the protected resource answers as the user;
    /// an assertion for another audience is refused by Authlib.
    @Test func authlibsAuthorizationServerAcceptsParleysAssertion() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let signing = try TestSigningKeys.generate()
        defer { signing.remove() }
        // The venv first (pip on a fresh machine), so the server's start is bounded by its own work.
        try ExternalCheck.run("/bin/bash", [packageRoot + "/scripts/peer-python.sh", "authlib-as", "-c", "import authlib.oauth2.rfc7523, joserfc"])
        let serverPort = try FreePort.find()
        let parleyPort = try FreePort.find()
        let parleyURL = "http://127.0.0.1:\(parleyPort)"
        let tokenURL = "http://127.0.0.1:\(serverPort)/token"
        let authlib = try await ParleyProcess.start(
            arguments: [
                packageRoot + "/scripts/peer-python.sh", "authlib-as", packageRoot + "/Tests/Fixtures/propagation/authlib_as.py", "--port", String(serverPort),
                "--token-url", tokenURL, "--client-issuer", parleyURL, "--client-jwks", parleyURL + "/.well-known/jwks.json",
                "--user", "alice@example.com",
            ], environment: ["HOME": NSTemporaryDirectory()], port: serverPort, binary: "/bin/bash", readyLine: "authlib-as ready")
        defer { Task { await authlib.stop() } }
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, _ in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            // The same client twice; the second's assertions name another audience.
            func destination(_ name: String, extra: String = "") -> String {
                """
                  - name: \(name)
                    url: http://127.0.0.1:\(serverPort)
                    registration: { identity: required }
                    oauth2:
                      grant: jwt_bearer
                      assertion: parley
                      subjectClaim: email
                      tokenEndpoint: \(tokenURL)
                      clientId: parley
                      clientSecret: s3cret\(extra)
                """
            }
            let destinations = try ScratchFile.write(
                """
                \(Self.simulatorIdentityProvider(sim))
                destinations:
                \(destination("authlib"))
                \(destination("authlib-elsewhere", extra: "\n      assertionAudience: https://another-server.example/token"))
                """, suffix: ".yaml")
            let parley = try await ParleyProcess.start(
                environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys, "PARLEY_DESTINATIONS": destinations,
                    "PARLEY_SIGNING_KEYS": "s1:\(signing.rsaKeyWithCertificatePath),s2:\(signing.ecKeyPath)", "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
                ], port: parleyPort)
            defer { Task { await parley.stop() } }
            let identity = try await IdentityTokenLiveTests.mint(simulatorPort, ["sub": "alice-1", "aud": "parley", "email": "alice@example.com"])
            let registration = try await Self.register(parley, "authlib", identity)
            let answer = try await RawHTTP.request(
                port: parley.port, method: "GET", target: "/v1/proxy/api/whoami", headers: [("Authorization", "Bearer \(registration)")])
            #expect(answer.status == 200, "\(answer.text) — Authlib's server: \(authlib.log.suffix(2000))")
            #expect(answer.json?["server"] as? String == "authlib")
            #expect(answer.json?["sub"] as? String == "alice@example.com")
            #expect(answer.json?["client"] as? String == parleyURL, "Authlib found the client by the assertion's iss")
            let elsewhere = try await Self.register(parley, "authlib-elsewhere", identity)
            let refused = try await RawHTTP.request(
                port: parley.port, method: "GET", target: "/v1/proxy/api/whoami", headers: [("Authorization", "Bearer \(elsewhere)")])
            #expect(refused.status == 403 && refused.json?["code"] as? String == "upstream_unauthorized", "\(refused.text)")
            await parley.stop()
        }
        await authlib.stop()
    }
}
