import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Identity you can trust, tried as an attacker would: the real `parley` binary with its
/// destinations file, real PostgreSQL, and two simulators, each an identity provider of its own
/// (a corporate one, whose authorization server is also where people sign in, and a partner).
/// Browsers are `PlainBrowser`s: these sign-ins are redirects and forms only.
@Suite(.serialized) struct IdentityTrustLiveTests {
    static let keys = "k1:" + Data(repeating: 3, count: 32).base64EncodedString()
    static let adminToken = AgentLiveTests.adminToken

    /// The corporate authorization server of `corp` as an OpenID Connect provider.
    static func oauth(_ corp: String) -> String {
        """
            oauth2:
              grant: authorization_code
              authorizationEndpoint: \(corp)/oauth/authorize
              tokenEndpoint: \(corp)/oauth/token
              revocationEndpoint: \(corp)/oauth/revoke
              clientId: parley-public
              issuer: \(corp)
              jwksUri: \(corp)/oauth/jwks
        """
    }

    /// Runs Parley with `destinations` (YAML of the entries, `corp` and `partner` standing for the
    /// simulators' URLs), both providers listed.
    static func withTwoProviders(
        kim: Bool = false, _ destinations: (_ corp: String, _ partner: String) -> String,
        _ body: (_ parley: ParleyProcess, _ corp: (port: Int, state: SimulatorState), _ partner: Int, _ store: PostgresStore) async throws -> Void
    ) async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        var configuration = SimulatorConfiguration()
        if kim { configuration.oauthUsers += [SimulatorUser(username: "kim", password: "kimchi")] }
        try await withRunningSimulator(configuration: configuration, logger: quietLogger) { corpPort, corpState in
            try await withRunningSimulator(logger: quietLogger) { partnerPort, _ in
                let corp = "http://127.0.0.1:\(corpPort)"
                let partner = "http://127.0.0.1:\(partnerPort)"
                let file = try ScratchFile.write(
                    """
                    identityProviders:
                      - { issuer: "\(corp)", jwksUri: "\(corp)/idp/jwks", audiences: [parley] }
                      - { issuer: "\(partner)", jwksUri: "\(partner)/idp/jwks", audiences: [parley] }
                    destinations:
                    \(destinations(corp, partner))
                    """, suffix: ".yaml")
                let parley = try await ParleyProcess.start(environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys, "PARLEY_DESTINATIONS": file,
                    "PARLEY_ADMIN_TOKENS": Self.adminToken, "PARLEY_RATE_LIMIT_REGISTRATIONS": "off", "PARLEY_LOG_LEVEL": "info",
                ])
                defer { Task { await parley.stop() } }
                try await withPostgresStore(StoreConfiguration(connectionString: database, maxConnections: 1)) { store in
                    try await body(parley, (corpPort, corpState), partnerPort, store)
                }
                await parley.stop()
            }
        }
    }

    static func mint(_ port: Int, _ object: [String: Any]) async throws -> String {
        try await IdentityTokenLiveTests.mint(port, object)
    }

    static func register(_ parley: ParleyProcess, _ object: [String: Any]) async throws -> RawHTTPResponse {
        try await IdentityTokenLiveTests.register(parley, object)
    }

    static func call(_ parley: ParleyProcess, _ method: String, _ target: String, token: String?, body: [String: Any]? = nil) async throws
        -> RawHTTPResponse
    {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if body != nil { headers.append(("Content-Type", "application/json")) }
        return try await RawHTTP.request(
            port: parley.port, method: method, target: target, headers: headers, body: try body.map { Array(try JSONSerialization.data(withJSONObject: $0)) } ?? [])
    }

    /// A person signs in at the corporate authorization server in `browser`, through the flow URL:
    /// the login page when there is no session there, the code at once when there is. The page the
    /// flow ended on.
    static func signIn(_ browser: inout PlainBrowser, flowURL: String, username: String, password: String) async throws -> PlainBrowser.Arrival {
        var page = try await browser.open(flowURL)
        if page.response.text.contains("data-parley-confirm") { page = try await browser.submit(page) }
        if page.url.contains("/oauth/authorize") { page = try await browser.submit(page, [("username", username), ("password", password)]) }
        return page
    }

    @Test func aPartnersAliceIsNeverTheCorporateAlice() async throws {
        try await Self.withTwoProviders(kim: true, { corp, partner in
            """
              - name: corp-api
                url: \(corp)/oauth-api
                identity: { providers: ["\(corp)"] }
            \(Self.oauth(corp))
              - name: shared-api
                url: \(corp)/oauth-api
                identity: { providers: ["\(corp)", "\(partner)"] }
            \(Self.oauth(corp))
              - name: by-email
                url: \(corp)
                basic: {}
                identity: { providers: ["\(corp)"], match: email }
            """
        }) { parley, corp, partnerPort, store in
            // Mallory's partner provider names her "alice". Where only corporate users count, her
            // token is refused and nothing is made.
            let malloryToken = try await Self.mint(partnerPort, ["sub": "alice", "aud": "parley"])
            let refused = try await Self.register(parley, ["destination": "corp-api", "identityToken": malloryToken])
            #expect(refused.status == 401 && refused.json?["code"] as? String == "invalid_identity_token", "\(refused.text)")
            #expect((refused.json?["detail"] as? String)?.contains("does not take") == true, "\(refused.text)")
            #expect(try await store.query("SELECT id FROM registrations").isEmpty)

            // Where both providers' users count, mallory's registration is partner-alice's.
            let mallory = try await Self.register(parley, ["destination": "shared-api", "identityToken": malloryToken])
            #expect(mallory.status == 201, "\(mallory.text)")
            let malloryClient = try #require(mallory.json?["clientToken"] as? String)
            #expect((mallory.json?["user"] as? [String: Any])?["issuer"] as? String == "http://127.0.0.1:\(partnerPort)")
            let challenged = try await Self.call(parley, "GET", "/v1/proxy/data", token: malloryClient)
            #expect(challenged.status == 401 && challenged.json?["code"] as? String == "interaction_required")
            let malloryFlow = try #require(challenged.json?["flow"] as? [String: Any])
            let malloryFlowURL = try #require(malloryFlow["url"] as? String)
            let malloryFlowID = try #require(malloryFlow["id"] as? String)

            // The real alice has her own registration and a session at the corporate server.
            var alice = PlainBrowser()
            let aliceToken = try await Self.mint(corp.port, ["sub": "alice", "aud": "parley"])
            let aliceRegistration = try await Self.register(parley, ["destination": "shared-api", "identityToken": aliceToken])
            let aliceClient = try #require(aliceRegistration.json?["clientToken"] as? String)
            let aliceFlow = try #require((try await Self.call(parley, "GET", "/v1/proxy/data", token: aliceClient)).json?["flow"] as? [String: Any])
            let aliceDone = try await Self.signIn(&alice, flowURL: try #require(aliceFlow["url"] as? String), username: "alice", password: "wonderland")
            #expect(aliceDone.response.text.contains("data-parley-flow-status=\"completed\""), "\(aliceDone.response.text.prefix(400))")
            #expect((try await Self.call(parley, "GET", "/v1/proxy/data", token: aliceClient)).json?["sub"] as? String == "alice")

            // Zero clicks: alice opens mallory's link. No page asks her anything and her session
            // answers at once, but the sign-in is corporate-alice's, not partner-alice's.
            let silentBefore = corp.state.oauth.silentAuthorizations
            let zeroClick = try await alice.open(malloryFlowURL)
            #expect(corp.state.oauth.silentAuthorizations == silentBefore + 1, "the authorization server answered from its session")
            #expect(zeroClick.response.text.contains("data-parley-flow-status=\"failed\""), "\(zeroClick.response.text.prefix(400))")
            let ended = try await Self.call(parley, "GET", "/v1/flows/\(malloryFlowID)", token: malloryClient)
            #expect(ended.json?["status"] as? String == "failed" && ended.json?["error"] as? String == "identity_mismatch", "\(ended.text)")
            let after = try await Self.call(parley, "GET", "/v1/proxy/data", token: malloryClient)
            #expect(after.status == 401 && after.json?["code"] as? String == "interaction_required", "mallory holds alice's token: \(after.text)")
            let malloryID = try #require(UUID(uuidString: mallory.json?["id"] as? String ?? ""))
            #expect(try await store.query("SELECT scope_key FROM tokens WHERE registration_id = \(malloryID)").isEmpty)

            // A name that lower-cases into another's: the Kelvin sign (U+212A) is not a K.
            let kelvin = try await Self.mint(corp.port, ["sub": "\u{212A}im", "aud": "parley"])
            let kelvinRegistration = try await Self.register(parley, ["destination": "corp-api", "identityToken": kelvin])
            #expect(kelvinRegistration.status == 201, "\(kelvinRegistration.text)")
            let kelvinClient = try #require(kelvinRegistration.json?["clientToken"] as? String)
            let kelvinFlow = try #require((try await Self.call(parley, "GET", "/v1/proxy/data", token: kelvinClient)).json?["flow"] as? [String: Any])
            var kim = PlainBrowser()
            let kimDone = try await Self.signIn(&kim, flowURL: try #require(kelvinFlow["url"] as? String), username: "kim", password: "kimchi")
            #expect(kimDone.response.text.contains("data-parley-flow-status=\"failed\""), "\(kimDone.response.text.prefix(400))")
            let kelvinEnded = try await Self.call(parley, "GET", "/v1/flows/\(try #require(kelvinFlow["id"] as? String))", token: kelvinClient)
            #expect(kelvinEnded.json?["error"] as? String == "identity_mismatch", "\(kelvinEnded.text)")
            // ASCII case still folds: KIM is kim.
            let upper = try await Self.register(
                parley, ["destination": "corp-api", "identityToken": try await Self.mint(corp.port, ["sub": "KIM", "aud": "parley"])])
            let upperClient = try #require(upper.json?["clientToken"] as? String)
            let upperFlow = try #require((try await Self.call(parley, "GET", "/v1/proxy/data", token: upperClient)).json?["flow"] as? [String: Any])
            var kim2 = PlainBrowser()
            let upperDone = try await Self.signIn(&kim2, flowURL: try #require(upperFlow["url"] as? String), username: "kim", password: "kimchi")
            #expect(upperDone.response.text.contains("data-parley-flow-status=\"completed\""), "\(upperDone.response.text.prefix(400))")

            // An email match needs the provider to vouch for the address.
            let unverified = try await Self.register(
                parley,
                ["destination": "by-email", "identityToken": try await Self.mint(corp.port, ["sub": "u1", "aud": "parley", "email": "alice@corp.example"])])
            #expect(unverified.status == 401 && (unverified.json?["detail"] as? String)?.contains("not verified") == true, "\(unverified.text)")
            let verified = try await Self.register(
                parley,
                [
                    "destination": "by-email",
                    "identityToken": try await Self.mint(
                        corp.port, ["sub": "u1", "aud": "parley", "email": "alice@corp.example", "jsonClaims": ["email_verified": true]]),
                ])
            #expect(verified.status == 201, "\(verified.text)")
        }
    }

    @Test func theDefaultAsksForAVerifiedUserAndOptionalIsWarnedAndMarked() async throws {
        try await Self.withTwoProviders({ corp, _ in
            """
              - name: guarded
                url: \(corp)/oauth-api
                identity: { providers: ["\(corp)"] }
            \(Self.oauth(corp))
              - name: open-door
                url: \(corp)/oauth-api
                identity: { providers: ["\(corp)"] }
                registration: { identity: optional }
            \(Self.oauth(corp))
            """
        }) { parley, _, _, store in
            // With a provider listed, a sign-in destination takes no registration without a verified user.
            let mallory = try await Self.register(parley, ["destination": "guarded", "deviceModel": "Alice's iPhone", "userHint": "alice@corp"])
            #expect(mallory.status == 403 && mallory.json?["code"] as? String == "forbidden", "\(mallory.text)")
            #expect(try await store.query("SELECT id FROM registrations").isEmpty)

            // Written out, optional is allowed, and warned about at every start, for that destination only.
            let warnings = parley.log.split(separator: "\n").filter { $0.contains("registration.identity is optional") }
            #expect(warnings.count == 1 && warnings.first?.contains("open-door") == true, "\(warnings)")

            // Its confirmation page keeps what the app said about itself apart, marked unchecked.
            let created = try await Self.register(parley, ["destination": "open-door", "deviceModel": "Alice's iPhone", "userHint": "alice@corp"])
            let client = try #require(created.json?["clientToken"] as? String)
            let flow = try #require((try await Self.call(parley, "GET", "/v1/proxy/data", token: client)).json?["flow"] as? [String: Any])
            var browser = PlainBrowser()
            let page = try await browser.open(try #require(flow["url"] as? String))
            let html = page.response.text
            let unchecked = try #require(html.range(of: "data-parley-unchecked"), "\(html.prefix(600))")
            let claimed = html[unchecked.upperBound...]
            #expect(claimed.contains("id=\"device-model\">Alice&#39;s iPhone</dd>") || claimed.contains("id=\"device-model\">Alice&#x27;s iPhone</dd>"), "\(html)")
            #expect(claimed.contains("id=\"user-hint\">alice@corp</dd>"))
            #expect(!html[..<unchecked.lowerBound].contains("Alice"), "the app's words stand among what Parley knows")
            // Continuing, the authorization server is asked for a login, whatever session it holds.
            let confirmed = try await browser.submit(page)
            #expect(confirmed.url.contains("/oauth/authorize") && confirmed.url.contains("prompt=login"), "\(confirmed.url)")
        }
    }

    @Test func aSAMLSignInParleyCouldNotReadKeepsNothingForARegistrationWithAUser() async throws {
        try await Self.withTwoProviders({ corp, _ in
            """
              - name: sap
                url: \(corp)/sp
                identity: { providers: ["\(corp)"] }
                registration: { identity: optional }
                saml2: {}
            """
        }) { parley, corp, _, store in
            _ = try await RawHTTP.request(
                port: corp.port, method: "POST", target: "/control/saml/acs", headers: [("Content-Type", "application/json")],
                body: Array(#"["http://127.0.0.1:\#(parley.port)/web/sap/saml/acs"]"#.utf8))
            // alice's registration, verified: its sign-ins must be hers.
            let token = try await Self.mint(corp.port, ["sub": "alice", "aud": "parley"])
            let created = try await Self.register(parley, ["destination": "sap", "identityToken": token])
            let client = try #require(created.json?["clientToken"] as? String)
            let id = try #require(UUID(uuidString: created.json?["id"] as? String ?? ""))
            let flow = try await Self.call(parley, "POST", "/v1/flows", token: client, body: ["kind": "saml2"])
            let flowURL = try #require(flow.json?["url"] as? String, "\(flow.text)")
            let flowID = try #require(flow.json?["id"] as? String)

            // The service provider signs alice in, but no SAMLResponse Parley can read crosses the
            // web path (this IdP's responses name nobody Parley can verify): the flow keeps nothing.
            var browser = PlainBrowser()
            var page = try await browser.open(flowURL)
            // This destination's sign-ins name nobody, so even a verified user's flow asks first.
            #expect(page.response.text.contains("data-parley-confirm"))
            page = try await browser.submit(page)
            page = try await browser.submit(page)  // the SP's SAML request, posted to the IdP
            #expect(page.url.contains("/idp/"), "\(page.url) \(page.response.text.prefix(300))")
            page = try await browser.submit(page, [("username", "alice"), ("password", "wonderland")])
            page = try await browser.submit(page)  // the IdP's response, posted to the ACS through Parley
            #expect(corp.state.saml.assertionsAccepted >= 1, "the service provider took the sign-in")
            #expect(page.response.text.contains("data-parley-flow-status=\"failed\""), "\(page.url) \(page.response.text.prefix(400))")
            let ended = try await Self.call(parley, "GET", "/v1/flows/\(flowID)", token: client)
            #expect(ended.json?["status"] as? String == "failed" && ended.json?["error"] as? String == "identity_unknown", "\(ended.text)")
            #expect(try await store.query("SELECT name FROM cookies WHERE registration_id = \(id)").isEmpty, "the SP's session reached the jar")
            #expect(try await store.query("SELECT id FROM registrations WHERE id = \(id) AND signed_in_at IS NOT NULL").isEmpty)
        }
    }

    /// An assertion Parley signs names the user, not the provider: the authorization server would
    /// get the same assertion for the partner's alice and the corporate alice. So a destination for
    /// which Parley signs takes one provider's users, and the binary refuses to start otherwise.
    @Test func aDestinationParleySignsForTakesTheUsersOfOneProvider() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let signing = try TestSigningKeys.generate()
        defer { signing.remove() }
        func start(_ providers: String) async throws -> ParleyProcess {
            let file = try ScratchFile.write(
                """
                identityProviders:
                  - { issuer: "https://corp.example", jwksUri: "https://corp.example/keys", audiences: [parley] }
                  - { issuer: "https://partner.example", jwksUri: "https://partner.example/keys", audiences: [parley] }
                destinations:
                  - name: sap
                    url: https://sap.example
                    identity: { providers: [\(providers)] }
                    registration: { identity: required }
                    oauth2: { grant: jwt_bearer, assertion: parley, tokenEndpoint: "https://sap.example/token", clientId: parley, clientSecret: s }
                """, suffix: ".yaml")
            return try await ParleyProcess.start(
                environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys, "PARLEY_DESTINATIONS": file,
                    "PARLEY_SIGNING_KEYS": "s1:\(signing.rsaKeyPath)",
                ], waitForReady: false)
        }
        let both = try await start(#""https://corp.example", "https://partner.example""#)
        #expect(try await both.waitForExit() == 78)
        #expect(both.log.contains("may take the users of one identity provider"), "\(both.log.suffix(800))")
        let one = try await start(#""https://corp.example""#)
        try await one.waitForOutput("parley ready", timeout: .seconds(30))
        await one.stop()
    }
}
