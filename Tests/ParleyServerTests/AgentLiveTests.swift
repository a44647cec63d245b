import Foundation
import ParleyEncoding
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Agents end to end: the real `parley` binary, PostgreSQL and the simulator, whose demo identity
/// provider issues RFC 9068 access tokens. An agent calls `/v1` with its access token in place of
/// a client token; its registration (user × client × destination) is made on first use, the token
/// never reaches the upstream, and every refusal says what a real resource server says
/// (`WWW-Authenticate` with `resource_metadata`, `error="invalid_token"`, `error="insufficient_scope"`).
@Suite(.serialized) struct AgentLiveTests {
    static let keys = "k1:" + Data(repeating: 9, count: 32).base64EncodedString()
    static let adminToken = "agent-admin-" + String(repeating: "x", count: 40)
    static let resource = "https://parley.example/agents"

    static func destinationsFile(_ sim: String) throws -> String {
        try ScratchFile.write(
            """
            \(PropagationLiveTests.simulatorIdentityProvider(sim))
            destinations:
              - name: agents
                url: \(sim)
                registration: { implicit: true, scopes: [orders.read, orders.write] }
              - name: people
                url: \(sim)
              - name: agents-exchange
                url: \(sim)
                registration: { implicit: true, identity: required }
                oauth2:
                  grant: token_exchange
                  audience: https://backend.example
                  subjectTokenType: access_token
                  tokenEndpoint: \(sim)/oauth/token
                  clientId: parley-confidential
                  clientSecret: s3cret
            """, suffix: ".yaml")
    }

    /// A call through the proxy with `token` as the bearer, naming `destination` when given.
    static func call(_ parley: ParleyProcess, _ token: String?, destination: String? = "agents", target: String = "/v1/proxy/echo/orders")
        async throws -> RawHTTPResponse
    {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if let destination { headers.append(("Parley-Destination", destination)) }
        return try await RawHTTP.request(port: parley.port, method: "GET", target: target, headers: headers)
    }

    static func admin(_ parley: ParleyProcess, _ method: String, _ target: String, body: [String: Any]? = nil) async throws -> RawHTTPResponse {
        var headers = [("Authorization", "Bearer \(adminToken)")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        return try await RawHTTP.request(
            port: parley.port, method: method, target: target, headers: headers,
            body: try body.map { Array(try JSONSerialization.data(withJSONObject: $0)) } ?? [])
    }

    /// The real binary on a fresh database with `destinations` (the path of a file for the
    /// simulator's URL; default `destinationsFile`), the simulator beside it trusting Parley's
    /// signing keys, `PARLEY_RESOURCE` set and `environment` added, for `body`; stopped after.
    static func withAgentParley(
        destinations: (String) throws -> String = { try AgentLiveTests.destinationsFile($0) }, environment: [String: String] = [:],
        _ body: (_ parley: ParleyProcess, _ database: String, _ simulatorPort: Int, _ simulator: SimulatorState) async throws -> Void
    ) async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        // Parley signs the subject token of an agent's token exchange; the authorization server
        // trusts its published keys, as an administrator sets up token exchange for Parley.
        let signing = try TestSigningKeys.generate()
        defer { signing.remove() }
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let parley = try await ParleyProcess.start(
                environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys,
                    "PARLEY_DESTINATIONS": try destinations("http://127.0.0.1:\(simulatorPort)"), "PARLEY_RESOURCE": Self.resource,
                    "PARLEY_ADMIN_TOKENS": Self.adminToken, "PARLEY_LOG_LEVEL": "debug", "PARLEY_SIGNING_KEYS": "s1:\(signing.rsaKeyPath)",
                ].merging(environment) { $1 })
            defer { Task { await parley.stop() } }
            let jwks = try await RawHTTP.request(port: parley.port, method: "GET", target: "/.well-known/jwks.json")
            simulator.oauth.trustedAssertionKeys = jwks.body
            try await body(parley, database, simulatorPort, simulator)
            await parley.stop()
        }
    }

    @Test func anAgentReachesTheUpstreamWithItsAccessTokenAndIsRefusedWhereAResourceServerRefuses() async throws {
        try await Self.withAgentParley { parley, _, simulatorPort, simulator in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            let metadataURL = "http://127.0.0.1:\(parley.port)/.well-known/oauth-protected-resource"
            var minted: [String] = []
            func accessToken(
                sub: String = "alice", client: String = "agent-a", scope: String = "orders.read orders.write", aud: String = Self.resource,
                typ: String = "at+jwt", exp: Double? = nil, act: String? = nil
            ) async throws -> String {
                var json: [String: Any] = ["client_id": client, "scope": scope]
                if let act { json["act"] = ["sub": act] }
                var object: [String: Any] = ["sub": sub, "aud": aud, "typ": typ, "jsonClaims": json]
                if let exp { object["exp"] = exp }
                let token = try await IdentityTokenLiveTests.mint(simulatorPort, object)
                minted.append(token)
                return token
            }

            // Without a token: 401, and the challenge names Parley's protected-resource metadata …
            let anonymous = try await Self.call(parley, nil)
            #expect(anonymous.status == 401 && anonymous.json?["code"] as? String == "invalid_client_token")
            #expect(anonymous.header("WWW-Authenticate")?.contains("resource_metadata=\"\(metadataURL)\"") == true, "\(anonymous.header("WWW-Authenticate") ?? "")")
            // … which names the resource, the identity provider as its authorization server and the scopes.
            let metadata = try await RawHTTP.request(port: parley.port, method: "GET", target: "/.well-known/oauth-protected-resource")
            #expect(metadata.status == 200 && metadata.header("Content-Type") == "application/json")
            #expect(metadata.json?["resource"] as? String == Self.resource)
            #expect(metadata.json?["authorization_servers"] as? [String] == [sim])
            #expect(metadata.json?["scopes_supported"] as? [String] == ["orders.read", "orders.write"])
            #expect(metadata.json?["bearer_methods_supported"] as? [String] == ["header"])

            // An agent's access token: its registration is made on first use, and the upstream
            // sees neither the token nor the destination header.
            let token = try await accessToken(act: "assistant-7")
            let first = try await Self.call(parley, token)
            #expect(first.status == 200, "\(first.text)")
            let seen = (first.json?["headers"] as? [String: [String]]) ?? [:]
            #expect(seen["authorization"] == nil && seen["Authorization"] == nil, "the agent's token was forwarded: \(seen.keys.sorted())")
            #expect(!first.text.contains(token.prefix(40)), "the agent's token reached the upstream")
            #expect(!seen.keys.contains { $0.lowercased() == "parley-destination" })
            #expect(try await Self.call(parley, token).status == 200)
            let me = try await Self.call(parley, token, target: "/v1/registrations/me")
            #expect(me.status == 200 && me.json?["client"] as? String == "agent-a", "\(me.text)")
            #expect((me.json?["user"] as? [String: Any])?["subject"] as? String == "alice")
            #expect((me.json?["user"] as? [String: Any])?["verified"] as? Bool == true)
            // The same user through another client is another registration.
            #expect(try await Self.call(parley, try await accessToken(client: "agent-b")).status == 200)
            let listedA = try await Self.admin(parley, "GET", "/admin/v1/registrations?client=agent-a")
            let itemsA = (listedA.json?["items"] as? [[String: Any]]) ?? []
            #expect(itemsA.count == 1 && itemsA.first?["id"] as? String == me.json?["id"] as? String, "\(listedA.text)")
            let listedB = (try await Self.admin(parley, "GET", "/admin/v1/registrations?client=agent-b").json?["items"] as? [[String: Any]]) ?? []
            #expect(listedB.count == 1 && listedB.first?["client"] as? String == "agent-b")
            #expect(listedB.first?["id"] as? String != itemsA.first?["id"] as? String)

            // Eight first calls at once for a new (user, client): one registration.
            let carol = try await accessToken(sub: "carol", client: "agent-c")
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 { group.addTask { try await Self.call(parley, carol).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 8))
            let carols = (try await Self.admin(parley, "GET", "/admin/v1/registrations?client=agent-c").json?["items"] as? [[String: Any]]) ?? []
            #expect(carols.count == 1)

            // Refusals, each as a resource server answers them.
            for (name, refused) in [
                ("a token for another resource", try await Self.call(parley, try await accessToken(aud: "https://elsewhere.example"))),
                ("an ID token", try await Self.call(parley, try await accessToken(typ: "JWT"))),
                ("an expired token", try await Self.call(parley, try await accessToken(exp: Date().timeIntervalSince1970 - 600))),
            ] {
                #expect(refused.status == 401 && refused.json?["code"] as? String == "invalid_client_token", "\(name): \(refused.text)")
                let challenge = refused.header("WWW-Authenticate") ?? ""
                #expect(challenge.contains("error=\"invalid_token\"") && challenge.contains("resource_metadata=\"\(metadataURL)\""), "\(name): \(challenge)")
            }
            let narrow = try await Self.call(parley, try await accessToken(scope: "orders.read"))
            #expect(narrow.status == 403 && narrow.json?["code"] as? String == "forbidden", "\(narrow.text)")
            let scopeChallenge = narrow.header("WWW-Authenticate") ?? ""
            #expect(scopeChallenge.contains("error=\"insufficient_scope\"") && scopeChallenge.contains("scope=\"orders.read orders.write\""), "\(scopeChallenge)")
            #expect((narrow.json?["detail"] as? String)?.hasSuffix("orders.write") == true)
            let noScopes = try await Self.call(parley, try await accessToken(scope: "profile"))
            #expect((noScopes.json?["detail"] as? String)?.hasSuffix("orders.read orders.write") == true, "every missing scope is named")
            let people = try await Self.call(parley, token, destination: "people")
            #expect(people.status == 403 && people.json?["code"] as? String == "forbidden", "a destination without implicit took an agent")
            let unnamed = try await Self.call(parley, token, destination: nil)
            #expect(unnamed.status == 400 && unnamed.json?["code"] as? String == "invalid_request")
            let unknown = try await Self.call(parley, token, destination: "nowhere")
            #expect(unknown.status == 400)
            // Every refused token made no registration.
            let all = (try await Self.admin(parley, "GET", "/admin/v1/registrations").json?["items"] as? [[String: Any]]) ?? []
            #expect(all.count == 3, "\(all.count) registrations")

            // The client dimension: the audit names the agent and its actor; metrics count by client;
            // an administrator revokes by client.
            let audit = try await Self.admin(parley, "GET", "/admin/v1/audit?limit=500")
            let created = ((audit.json?["items"] as? [[String: Any]]) ?? []).filter {
                $0["action"] as? String == "registration.created" && ($0["detail"] as? [String: String])?["agent"] == "agent-a"
            }
            #expect(created.count == 1 && (created.first?["detail"] as? [String: String])?["actor"] == "assistant-7", "\(created)")
            let metrics = try await RawHTTP.request(port: parley.port, method: "GET", target: "/metrics")
            let accepted = metrics.text.split(separator: "\n").filter {
                $0.hasPrefix("parley_agent_requests") && $0.contains("client=\"agent-a\"") && $0.contains("outcome=\"accepted\"")
            }
            // Two proxied calls and GET /v1/registrations/me; two calls short of a scope.
            #expect(accepted.count == 1 && accepted.first?.hasSuffix(" 3") == true, "\(metrics.text.split(separator: "\n").filter { $0.contains("agent") })")
            #expect(metrics.text.contains(#"parley_agent_requests_total{destination="agents",client="agent-a",outcome="insufficient_scope"} 2"#))
            #expect(metrics.text.contains(#"parley_agent_requests_total{destination="-",client="-",outcome="invalid_token"} 3"#))
            let revoked = try await Self.admin(parley, "POST", "/admin/v1/revocations", body: ["client": "agent-a"])
            #expect(revoked.status == 200, "\(revoked.text)")
            let revocation = ((try await Self.admin(parley, "GET", "/admin/v1/audit?limit=10").json?["items"] as? [[String: Any]]) ?? []).first {
                $0["action"] as? String == "admin.revocation"
            }
            #expect((revocation?["detail"] as? [String: String])?["client"] == "agent-a")
            #expect((revocation?["detail"] as? [String: String])?["registrations"] == "1")

            // Two calls of agent-a, one of agent-b, eight of carol's; no refused call went upstream.
            #expect(simulator.requests(route: "ANY /echo") == 11)
            for token in minted { #expect(!parley.log.contains(token), "an access token was logged") }
        }
    }

    /// An agent on a destination whose grant speaks for the user: the RFC 8693 subject token is a
    /// JWT Parley signs for the user (`act` naming the agent's client), the agent's own token is
    /// sent nowhere (a tap on the authorization server sees it in no request), the back end sees
    /// the token the authorization server issued, and a newer token of the agent replaces the identity kept.
    @Test func anAgentsTokenIsExchangedForTheBackEndsOwnAndTheNewestIsKept() async throws {
        try await Self.withAgentParley { parley, database, simulatorPort, simulator in
            func accessToken(exp: Double) async throws -> String {
                try await IdentityTokenLiveTests.mint(
                    simulatorPort, ["sub": "alice", "aud": Self.resource, "typ": "at+jwt", "exp": exp, "jsonClaims": ["client_id": "agent-x"]])
            }
            func sealedIdentity() async throws -> [UInt8] {
                try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                    try await store.query("SELECT identity_token_sealed FROM registrations WHERE agent_client = 'agent-x'")[0].bytes("identity_token_sealed")
                }
            }
            let now = Date().timeIntervalSince1970.rounded(.down)
            let first = try await accessToken(exp: now + 600)
            let answer = try await Self.call(parley, first, destination: "agents-exchange", target: "/v1/proxy/oauth-api/orders")
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.json?["sub"] as? String == "alice" && answer.json?["grant"] as? String == "token_exchange")
            #expect(answer.json?["aud"] as? String == "https://backend.example")
            #expect(simulator.oauth.tokenCallsByGrant["urn:ietf:params:oauth:grant-type:token-exchange"] == 1)
            let kept = try await sealedIdentity()
            #expect(!String(decoding: kept, as: UTF8.self).contains(first.prefix(40)), "the agent's token is stored in the clear")
            // The same token again: nothing is written; a newer one replaces it, and the next
            // exchange (the back end's token expired) speaks with it.
            #expect(try await Self.call(parley, first, destination: "agents-exchange", target: "/v1/proxy/oauth-api/orders").status == 200)
            #expect(try await sealedIdentity() == kept)
            let second = try await accessToken(exp: now + 1200)
            _ = try await RawHTTP.request(port: simulatorPort, method: "POST", target: "/sim/oauth/expire-access-tokens")
            let again = try await Self.call(parley, second, destination: "agents-exchange", target: "/v1/proxy/oauth-api/orders")
            #expect(again.status == 200 && again.json?["sub"] as? String == "alice", "\(again.text)")
            #expect(try await sealedIdentity() != kept, "the newer token was not kept")
            #expect(simulator.oauth.tokenCallsByGrant["urn:ietf:params:oauth:grant-type:token-exchange"] == 2)
            for token in [first, second] { #expect(!parley.log.contains(token)) }
            // What the authorization server got: Parley's own JWT for alice, acting for agent-x.
            let tapped = simulator.oauth.tokenRequests
            #expect(tapped.count >= 2)
            for token in [first, second] {
                for part in token.split(separator: ".") where part.count > 16 {
                    #expect(!tapped.contains { $0.contains(part) }, "a part of the agent's token reached the authorization server")
                }
            }
            let subjectToken = try #require(simulator.oauth.lastAssertion(grant: "token_exchange"))
            let claims = try #require(
                try JSONSerialization.jsonObject(with: Data(Base64.decode(String(subjectToken.split(separator: ".")[1])) ?? [])) as? [String: Any])
            #expect(claims["iss"] as? String == "http://127.0.0.1:\(parley.port)" && claims["sub"] as? String == "alice")
            #expect((claims["act"] as? [String: Any])?["sub"] as? String == "agent-x", "\(claims)")
            #expect((claims["exp"] as? Double ?? 0) - (claims["iat"] as? Double ?? 0) <= 300, "a few minutes' lifetime")
        }
    }

    /// The official MCP Python SDK as the agent: configured with its client credentials and its
    /// authorization server's issuer only, it is refused, reads Parley's protected-resource
    /// metadata, gets a token for Parley's resource from the simulator's authorization server,
    /// and uses a real MCP server (the SDK's own) through Parley, which never forwards the token.
    @Test func theMCPSDKFindsItsTokenThroughTheMetadataAndUsesAnMCPServerThroughParley() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let upstreamPort = try FreePort.find()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, _ in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            let destinations = try ScratchFile.write(
                """
                \(PropagationLiveTests.simulatorIdentityProvider(sim))
                destinations:
                  - name: mcp
                    url: http://127.0.0.1:\(upstreamPort)
                    registration: { implicit: true, scopes: [mcp.tools] }
                """, suffix: ".yaml")
            let parley = try await ParleyProcess.start(environment: [
                "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys, "PARLEY_DESTINATIONS": destinations,
                "PARLEY_ADMIN_TOKENS": Self.adminToken, "PARLEY_LOG_LEVEL": "debug",
            ])
            defer { Task { await parley.stop() } }
            let base = "http://127.0.0.1:\(parley.port)"
            let out = NSTemporaryDirectory() + "parley-mcp-\(UUID().uuidString).json"
            defer { try? FileManager.default.removeItem(atPath: out) }
            try ExternalCheck.run(
                "/bin/bash",
                [
                    packageRoot + "/scripts/peer-python.sh", "mcp-sdk", packageRoot + "/Tests/Fixtures/agents/mcp_check.py", "--upstream-port", String(upstreamPort),
                    "--parley", base, "--issuer", sim, "--destination", "mcp", "--client-id", "parley-confidential", "--client-secret", "s3cret",
                    "--scope", "mcp.tools", "--out", out,
                ])
            let result = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out))) as? [String: Any])
            let requests = (result["requests"] as? [[String: Any]]) ?? []
            func index(_ method: String, _ url: String, _ status: Int) -> Int? {
                requests.firstIndex { $0["method"] as? String == method && $0["url"] as? String == url && $0["status"] as? Int == status }
            }
            // Refused, then the metadata, the authorization server's metadata, the token, and in.
            let refused = index("POST", base + "/v1/proxy/mcp", 401)
            let metadata = index("GET", base + "/.well-known/oauth-protected-resource", 200)
            let discovery = index("GET", sim + "/.well-known/oauth-authorization-server", 200)
            let token = index("POST", sim + "/oauth/token", 200)
            let accepted = index("POST", base + "/v1/proxy/mcp", 200)
            #expect(refused != nil && metadata != nil && discovery != nil && token != nil && accepted != nil, "\(requests)")
            if let refused, let metadata, let discovery, let token, let accepted {
                #expect(refused < metadata && metadata < discovery && discovery < token && token < accepted, "\(requests)")
            }
            #expect(result["tools"] as? [String] == ["echo", "seen_authorization_headers"])
            #expect(result["echo"] as? String == "upstream echo: hello through parley")
            #expect((result["upstreamSawAuthorization"] as? [String]) == [], "the MCP server behind Parley was sent an Authorization header")
            let accessToken = try #require(result["accessToken"] as? String)
            #expect(!parley.log.contains(accessToken), "the agent's access token was logged")
            // The agent's registration: the client's own (client credentials: the user is the client).
            let listed = (try await Self.admin(parley, "GET", "/admin/v1/registrations?client=parley-confidential").json?["items"] as? [[String: Any]]) ?? []
            #expect(listed.count == 1 && listed.first?["destination"] as? String == "mcp", "\(listed)")
            #expect(((listed.first?["user"] as? [String: Any])?["subject"] as? String) == "parley-confidential")
            await parley.stop()
        }
    }
}
