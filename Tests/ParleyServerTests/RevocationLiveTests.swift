import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// A revocation that sticks, live: the real binary, PostgreSQL, and the simulator as identity
/// provider and authorization server (RFC 8693 token exchange for thin clients and agents).
/// Revoking a registration, a user or a client, deleting an agent's registration, or the identity
/// provider's back-channel logout each leave the user (or client) refused until a token issued
/// after it: no grant runs from the kept identity, no implicit registration comes back.
@Suite(.serialized) struct RevocationLiveTests {
    static let resource = AgentLiveTests.resource
    static let exchange = "urn:ietf:params:oauth:grant-type:token-exchange"

    static func withParley(
        _ body: (_ parley: ParleyProcess, _ simulatorPort: Int, _ simulator: SimulatorState, _ store: PostgresStore) async throws -> Void
    ) async throws {
        try await AgentLiveTests.withAgentParley(
            destinations: { sim in
                let grant = """
                        oauth2:
                          grant: token_exchange
                          audience: https://backend.example
                          tokenEndpoint: \(sim)/oauth/token
                          revocationEndpoint: \(sim)/oauth/revoke
                          clientId: parley-confidential
                          clientSecret: s3cret
                    """
                return try ScratchFile.write(
                    """
                    \(PropagationLiveTests.simulatorIdentityProvider(sim))
                    destinations:
                      - name: exchange
                        url: \(sim)
                        registration: { identity: required }
                    \(grant)
                      - name: agents-exchange
                        url: \(sim)
                        registration: { implicit: true, identity: required }
                    \(grant)
                    """, suffix: ".yaml")
            }, environment: ["PARLEY_RATE_LIMIT_REGISTRATIONS": "off", "PARLEY_LOG_LEVEL": "info"]
        ) { parley, database, simulatorPort, simulator in
            try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                try await body(parley, simulatorPort, simulator, store)
            }
        }
    }

    /// An identity token of `subject` issued `age` seconds ago (negative: in the future).
    static func identityToken(_ port: Int, _ subject: String, issuedAgo age: Double) async throws -> String {
        try await IdentityTokenLiveTests.mint(port, ["sub": subject, "aud": "parley", "iat": Date().timeIntervalSince1970 - age])
    }

    /// An agent's access token (RFC 9068) for Parley, of `subject` with `client`, issued `age` seconds ago.
    static func accessToken(_ port: Int, _ subject: String, client: String, issuedAgo age: Double) async throws -> String {
        try await IdentityTokenLiveTests.mint(
            port,
            ["sub": subject, "aud": resource, "typ": "at+jwt", "iat": Date().timeIntervalSince1970 - age, "jsonClaims": ["client_id": client]])
    }

    static func order(_ parley: ParleyProcess, token: String, agent: Bool = false) async throws -> RawHTTPResponse {
        var headers = [("Authorization", "Bearer \(token)")]
        if agent { headers.append(("Parley-Destination", "agents-exchange")) }
        return try await RawHTTP.request(port: parley.port, method: "GET", target: "/v1/proxy/oauth-api/orders", headers: headers)
    }

    static func revoke(_ parley: ParleyProcess, _ body: [String: Any]) async throws {
        let answer = try await AgentLiveTests.admin(parley, "POST", "/admin/v1/revocations", body: body)
        #expect(answer.status == 200, "\(answer.text)")
    }

    static func renew(_ parley: ParleyProcess, client: String, _ token: String) async throws -> RawHTTPResponse {
        try await IdentityTrustLiveTests.call(parley, "PUT", "/v1/registrations/me/identity", token: client, body: ["identityToken": token])
    }

    @Test func aRevokedUserStaysRevokedUntilATokenIssuedAfterwards() async throws {
        try await Self.withParley { parley, port, simulator, store in
            // By registration: alice's registration speaks for her until it is revoked.
            let old = try await Self.identityToken(port, "alice", issuedAgo: 30)
            let created = try await IdentityTokenLiveTests.register(parley, ["destination": "exchange", "identityToken": old])
            let client = try #require(created.json?["clientToken"] as? String, "\(created.text)")
            let id = try #require(created.json?["id"] as? String)
            let first = try await Self.order(parley, token: client)
            #expect(first.status == 200 && first.json?["sub"] as? String == "alice", "\(first.text)")
            let grants = simulator.oauth.tokenCalls(grant: Self.exchange)
            try await Self.revoke(parley, ["registrationId": id])
            // The next call does not run the grant again from the identity kept before: there is none.
            let revoked = try await Self.order(parley, token: client)
            #expect(revoked.status == 401 && revoked.json?["code"] as? String == "invalid_identity_token", "\(revoked.text)")
            #expect(simulator.oauth.tokenCalls(grant: Self.exchange) == grants, "a grant ran for a revoked registration")
            // The old token cannot bring it back, nor make a new registration.
            let again = try await Self.renew(parley, client: client, old)
            #expect(again.status == 401 && (again.json?["detail"] as? String)?.contains("revoked") == true, "\(again.text)")
            let fresh = try await IdentityTokenLiveTests.register(parley, ["destination": "exchange", "identityToken": old])
            #expect(fresh.status == 401 && fresh.json?["code"] as? String == "invalid_identity_token", "\(fresh.text)")
            // One issued after the revocation does.
            #expect(try await Self.renew(parley, client: client, try await Self.identityToken(port, "alice", issuedAgo: -5)).status == 200)
            #expect(try await Self.order(parley, token: client).status == 200)

            // By user: every registration of bob's.
            let bobOld = try await Self.identityToken(port, "bob", issuedAgo: 30)
            let bob = try #require(
                (try await IdentityTokenLiveTests.register(parley, ["destination": "exchange", "identityToken": bobOld])).json?["clientToken"] as? String)
            #expect(try await Self.order(parley, token: bob).status == 200)
            try await Self.revoke(parley, ["user": ["issuer": "http://127.0.0.1:\(port)", "subject": "bob"]])
            #expect(try await Self.order(parley, token: bob).status == 401)
            #expect(try await Self.renew(parley, client: bob, bobOld).status == 401)
            #expect(try await Self.renew(parley, client: bob, try await Self.identityToken(port, "bob", issuedAgo: -5)).status == 200)
            #expect(try await Self.order(parley, token: bob).status == 200)

            // By client: an agent's tokens issued until now are refused; its registration is not
            // made anew for them either.
            let agentOld = try await Self.accessToken(port, "carol", client: "agent-r", issuedAgo: 30)
            let agentFirst = try await Self.order(parley, token: agentOld, agent: true)
            #expect(agentFirst.status == 200 && agentFirst.json?["sub"] as? String == "carol", "\(agentFirst.text)")
            try await Self.revoke(parley, ["client": "agent-r"])
            let agentRevoked = try await Self.order(parley, token: agentOld, agent: true)
            #expect(agentRevoked.status == 401 && agentRevoked.header("WWW-Authenticate")?.contains("error=\"invalid_token\"") == true, "\(agentRevoked.text)")
            #expect(try await Self.order(parley, token: try await Self.accessToken(port, "carol", client: "agent-r", issuedAgo: -5), agent: true).status == 200)

            // Deleting an agent's registration: the same token does not create it again.
            let daveOld = try await Self.accessToken(port, "dave", client: "agent-s", issuedAgo: 30)
            #expect(try await Self.order(parley, token: daveOld, agent: true).status == 200)
            let daveID = try #require(try await store.query("SELECT id FROM registrations WHERE agent_client = 'agent-s'").first?.uuid("id"))
            let deleted = try await AgentLiveTests.admin(parley, "DELETE", "/admin/v1/registrations/\(daveID.uuidString.lowercased())")
            #expect(deleted.status == 204, "\(deleted.text)")
            #expect(try await Self.order(parley, token: daveOld, agent: true).status == 401)
            #expect(try await store.query("SELECT id FROM registrations WHERE agent_client = 'agent-s'").isEmpty, "the agent's registration came back")
            #expect(try await Self.order(parley, token: try await Self.accessToken(port, "dave", client: "agent-s", issuedAgo: -5), agent: true).status == 200)

            // A registration revoked holds its user back everywhere: erin's other registration
            // runs no grant again from the identity it kept before.
            let erinOld = try await Self.identityToken(port, "erin", issuedAgo: 30)
            func erinRegistration() async throws -> (id: String, client: String) {
                let made = try await IdentityTokenLiveTests.register(parley, ["destination": "exchange", "identityToken": erinOld])
                return (try #require(made.json?["id"] as? String), try #require(made.json?["clientToken"] as? String))
            }
            let erinA = try await erinRegistration()
            let erinB = try await erinRegistration()
            #expect(try await Self.order(parley, token: erinA.client).status == 200)
            #expect(try await Self.order(parley, token: erinB.client).status == 200)
            _ = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/expire-access-tokens")
            try await Self.revoke(parley, ["registrationId": erinA.id])
            let exchanges = simulator.oauth.tokenCalls(grant: Self.exchange)
            let other = try await Self.order(parley, token: erinB.client)
            #expect(other.status == 401 && other.json?["code"] as? String == "invalid_identity_token", "\(other.text)")
            #expect(simulator.oauth.tokenCalls(grant: Self.exchange) == exchanges, "a grant ran from an identity given before the revocation")
            #expect(try await Self.renew(parley, client: erinB.client, try await Self.identityToken(port, "erin", issuedAgo: -5)).status == 200)
            #expect(try await Self.order(parley, token: erinB.client).status == 200)
        }
    }

    @Test func theIdentityProvidersBackChannelLogoutEndsTheUsersSessionsEverywhere() async throws {
        try await Self.withParley { parley, port, _, store in
            let old = try await Self.identityToken(port, "frank", issuedAgo: 30)
            let client = try #require(
                (try await IdentityTokenLiveTests.register(parley, ["destination": "exchange", "identityToken": old])).json?["clientToken"] as? String)
            #expect(try await Self.order(parley, token: client).status == 200)
            let agent = try await Self.accessToken(port, "frank", client: "agent-f", issuedAgo: 30)
            #expect(try await Self.order(parley, token: agent, agent: true).status == 200)
            let tokensBefore = try await store.query("SELECT scope_key FROM tokens").count

            func logoutToken(_ changes: [String: Any] = [:], events: Bool = true, jti: String = UUID().uuidString) async throws -> String {
                var json: [String: Any] = ["jti": jti]
                if events { json["events"] = ["http://schemas.openid.net/event/backchannel-logout": [String: Any]()] }
                var object: [String: Any] = ["sub": "frank", "aud": "parley", "typ": "logout+jwt", "jsonClaims": json]
                for (key, value) in changes { object[key] = value }
                return try await IdentityTokenLiveTests.mint(port, object)
            }
            func logout(_ token: String) async throws -> RawHTTPResponse {
                try await RawHTTP.request(
                    port: parley.port, method: "POST", target: "/backchannel-logout", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                    body: Array("logout_token=\(token)".utf8))
            }
            func loggedOut() async throws -> Int {
                let audit = try await AgentLiveTests.admin(parley, "GET", "/admin/v1/audit?limit=500")
                return ((audit.json?["items"] as? [[String: Any]]) ?? []).filter { $0["action"] as? String == "user.logged_out" }.count
            }

            // What is not a logout token of a listed provider changes nothing.
            var jsonClaimsWithNonce: [String: Any] = ["jti": "n1", "nonce": "x"]
            jsonClaimsWithNonce["events"] = ["http://schemas.openid.net/event/backchannel-logout": [String: Any]()]
            let refused: [(String, String)] = [
                ("an ID token (no events)", try await logoutToken(events: false)),
                ("a nonce", try await IdentityTokenLiveTests.mint(port, ["sub": "frank", "aud": "parley", "jsonClaims": jsonClaimsWithNonce])),
                ("another audience", try await logoutToken(["aud": "someone-else"])),
                ("another issuer", try await logoutToken(["iss": "https://evil.example"])),
                ("unsigned", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmcmFuayJ9."),
                ("no iat", try await logoutToken(["iat": 0])),
                ("expired", try await logoutToken(["exp": Date().timeIntervalSince1970 - 600])),
            ]
            for (name, token) in refused {
                let answer = try await logout(token)
                #expect(answer.status == 400 && answer.json?["code"] as? String == "invalid_request", "\(name): \(answer.status) \(answer.text)")
            }
            let notAForm = try await RawHTTP.request(
                port: parley.port, method: "POST", target: "/backchannel-logout", headers: [("Content-Type", "application/json")],
                body: Array(#"{"logout_token":"x"}"#.utf8))
            #expect(notAForm.status == 400)
            #expect(try await loggedOut() == 0)
            #expect(try await Self.order(parley, token: client).status == 200, "a refused logout token ended a session")
            #expect(try await store.query("SELECT scope_key FROM tokens").count == tokensBefore)

            // The identity provider says frank's sessions ended: everywhere, for his registrations
            // and the agent acting for him, until a token issued afterwards.
            let token = try await logoutToken()
            let answer = try await logout(token)
            #expect(answer.status == 200 && answer.header("Cache-Control") == "no-store", "\(answer.status) \(answer.text)")
            #expect(try await loggedOut() == 1)
            #expect(try await store.query("SELECT scope_key FROM tokens").isEmpty)
            #expect(try await Self.order(parley, token: client).status == 401)
            #expect(try await Self.order(parley, token: agent, agent: true).status == 401)
            #expect(try await Self.renew(parley, client: client, old).status == 401)
            // Taken once: the same token again is a replay.
            let replay = try await logout(token)
            #expect(replay.status == 400 && (replay.json?["detail"] as? String)?.contains("used before") == true, "\(replay.text)")
            #expect(try await loggedOut() == 1)
            // A new sign-in at the provider brings frank back.
            #expect(try await Self.renew(parley, client: client, try await Self.identityToken(port, "frank", issuedAgo: -5)).status == 200)
            #expect(try await Self.order(parley, token: client).status == 200)
            #expect(!parley.log.contains(token), "the logout token was logged")
        }
    }
}
