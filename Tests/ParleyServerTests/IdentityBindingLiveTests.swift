import AuthFlows
import Foundation
import ParleyEncoding
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// The identity rules of the contract ("Identity") with the real pieces: headless Chromium,
/// PostgreSQL, the SimpleSAMLphp identity provider with the pysaml2 service provider
/// (Tests/Fixtures/saml), and the simulator's authorization server, which issues `id_token`s
/// and keeps a login session (`AS_SESSION`), and its identity provider (`/idp/jwks`,
/// `POST /control/identity-token`).
///
/// - The phishing case: an attacker's flow URL, opened by a victim whose browser is signed in
///   at the IdP or AS (or who would type a password into the Basic form), stays on Parley's
///   confirmation page, contacts nobody, and nothing reaches the attacker's registration.
/// - A verified user goes straight on; somebody else signing in is `identity_mismatch`.
/// - A first sign-in binds the registration; a later one as somebody else fails (OAuth2, SAML).
@Suite(.serialized) struct IdentityBindingLiveTests {
    typealias SAMLFixture = HostedFlowLiveTests.SAMLFixture

    static let admin = [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk")]
    /// The audience of the identity tokens these tests mint (their identity provider lists it).
    static let audience = "parley-identity-tests"

    // MARK: destinations and identity tokens

    /// An authorization-code destination (public client) at the simulator's authorization
    /// server that reads who signed in from the `id_token` (its issuer is the simulator's address).
    static func openIDDestination(_ url: String, identityRequired: Bool = false) -> DestinationSpec {
        var spec = OAuth2Tests.destination(url, grant: "authorization_code", clientID: "parley-public", secret: nil)
        spec.displayName = "Simulated CRM"
        spec.oauth2?.issuer = url
        spec.oauth2?.jwksUri = url + "/oauth/jwks"
        if identityRequired {
            spec.registration = .init(identity: "required")
            spec.identity = .init(match: "sub")
        }
        return spec
    }

    /// Lists the simulator's identity provider (`identityProviders`): its issuer is the
    /// simulator's address, its keys are at `/idp/jwks`.
    static let simulatorIdentityProvider: @Sendable (inout ParleyConfiguration) -> Void = { configuration in
        guard let url = configuration.destinations["as"]?.baseURL else { return }
        configuration.identityProviders = [
            IdentityProvider(issuer: url, jwksURI: url + "/idp/jwks", audiences: [IdentityBindingLiveTests.audience])
        ]
    }

    /// An identity token for `subject`, minted by the simulator (`POST /control/identity-token`).
    static func identityToken(_ live: LiveParley, subject: String) async throws -> String {
        let response = try await RawHTTP.request(
            port: live.simulatorPort, method: "POST", target: "/control/identity-token", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: ["sub": subject, "aud": audience])))
        return try #require(
            response.json?["token"] as? String, "the simulator minted no identity token: \(response.status) \(response.text.prefix(200))")
    }

    /// The real SAML2 service provider through Parley, trusting the fixture IdP's certificate
    /// (`saml2.idpCertificates`) when `certificate` is given.
    static func samlDestination(_ fixture: SAMLFixture, certificate: String?) -> DestinationSpec {
        var spec = DestinationSpec(name: "realsaml", url: "http://127.0.0.1:\(fixture.spPort)")
        spec.displayName = "Real SAML SP"
        spec.saml2 = .init(idpCertificates: certificate.map { [$0] })
        return spec
    }

    // MARK: what the registration holds

    /// How many rows of `table` (`tokens`, `cookies`) belong to the registration.
    static func rows(_ live: LiveParley, _ table: String, of registration: String) async throws -> Int {
        let id = try #require(UUID(uuidString: registration))
        return try await live.store.query("SELECT count(*) AS n FROM \(unsafeSQL: table) WHERE registration_id = \(id)")[0].int("n")
    }

    /// What a flow could change in the registration's row: status, APPCID, credentials, user.
    static func registrationState(_ live: LiveParley, _ registration: String) async throws -> String {
        let id = try #require(UUID(uuidString: registration))
        let rows = try await live.store.query(
            """
            SELECT row_to_json(r)::text AS j FROM (SELECT status, appcid_sealed, credentials_sealed, user_issuer, user_subject,
            user_verified, user_match FROM registrations WHERE id = \(id)) r
            """)
        return try #require(rows.first, "no registration \(registration)").string("j")
    }

    /// The registration's `user` as `GET /v1/registrations/me` shows it (nil for `null`).
    static func user(_ live: LiveParley, token: String) async throws -> [String: Any]? {
        let me = try await live.request("GET", "/v1/registrations/me", token: token)
        #expect(me.status == 200, "GET /v1/registrations/me: \(me.status) \(me.text.prefix(300))")
        #expect(me.json?.keys.contains("user") == true, "the registration has no user field: \(me.text.prefix(300))")
        return me.json?["user"] as? [String: Any]
    }

    /// The registration's audit events with `action`.
    static func auditEvents(_ live: LiveParley, _ action: String, registration: String) async throws -> [[String: Any]] {
        let answer = try await live.request("GET", "/admin/v1/audit?limit=500", headers: admin)
        #expect(answer.status == 200, "GET /admin/v1/audit: \(answer.status) \(answer.text.prefix(300))")
        let items = answer.json?["items"] as? [[String: Any]] ?? []
        return items.filter { $0["action"] as? String == action && $0["registrationId"] as? String == registration }
    }

    // MARK: flows

    /// `POST /v1/flows` (with `kind` when given): the flow's id and URL.
    static func startFlow(_ live: LiveParley, token: String, kind: String? = nil) async throws -> (id: String, url: String) {
        let created = try await live.json("POST", "/v1/flows", token: token, kind.map { ["kind": $0] } ?? [:])
        #expect(created.status == 201, "POST /v1/flows: \(created.status) \(created.text.prefix(300))")
        return (
            try #require(created.json?["id"] as? String, "POST /v1/flows named no flow"),
            try #require(created.json?["url"] as? String, "POST /v1/flows gave no url")
        )
    }

    /// A proxied call that needs a person: the flow its `401 interaction_required` names.
    static func challenged(_ live: LiveParley, _ path: String, token: String, kind: String) async throws -> (id: String, url: String) {
        let answer = try await live.request("GET", path, token: token)
        #expect(
            answer.status == 401 && answer.json?["code"] as? String == "interaction_required",
            "\(path): expected 401 interaction_required, got \(answer.status) \(answer.text.prefix(300))")
        let flow = try #require(answer.json?["flow"] as? [String: Any], "\(path) named no flow")
        #expect(flow["kind"] as? String == kind)
        return (try #require(flow["id"] as? String), try #require(flow["url"] as? String))
    }

    /// The flow once it has left `pending` (`GET /v1/flows/{id}?wait=30`).
    static func ended(_ live: LiveParley, _ flow: String, token: String) async throws -> [String: Any] {
        let answer = try await live.request("GET", "/v1/flows/\(flow)?wait=30", token: token)
        return try #require(answer.json, "GET /v1/flows/\(flow): \(answer.status) \(answer.text.prefix(300))")
    }

    /// Expects the flow to have failed with `identity_mismatch`.
    static func expectMismatch(_ live: LiveParley, _ flow: String, token: String) async throws {
        let status = try await ended(live, flow, token: token)
        #expect(
            status["status"] as? String == "failed" && status["error"] as? String == "identity_mismatch",
            "expected the flow failed with identity_mismatch, it is \(status["status"] ?? "?") with error \(status["error"] ?? "?")")
    }

    /// Opens `flowURL` in `browser` and expects Parley's confirmation page, and nothing else: the
    /// browser stays at the flow URL, the page asks for no password, and a plain `GET` of the URL
    /// answers the page with nothing that sends a browser on (no `Location`, `Refresh`, meta
    /// refresh or script).
    static func expectConfirmationPageOnly(_ browser: WebDriverSession, _ live: LiveParley, flowURL: String) async throws {
        try await browser.navigate(to: flowURL)
        try await browser.find("[data-parley-confirm] button", "Parley's confirmation page at the flow URL")
        #expect(try await browser.currentURL() == flowURL, "the browser left the flow URL without a click")
        let page = try await browser.pageSource()
        #expect(!page.contains("type=\"password\""), "the confirmation page asks for a password")
        let raw = try await live.request("GET", String(flowURL.dropFirst(live.baseURL.count)))
        #expect(raw.status == 200, "a GET of the flow URL answered \(raw.status), not the confirmation page")
        #expect(raw.text.contains("data-parley-confirm"))
        #expect(raw.header("Location") == nil && raw.header("Refresh") == nil, "a GET of the flow URL sends the browser on")
        let lowered = raw.text.lowercased()
        #expect(!lowered.contains("http-equiv") && !lowered.contains("<script"), "the confirmation page sends the browser on by itself")
    }

    /// Expects that nothing reached the attacker's registration: no cookie, no token, no user, and
    /// a proxied call (`path`) still needs a person.
    static func expectNothingReached(_ live: LiveParley, attacker: String, token: String, path: String) async throws {
        #expect(try await rows(live, "cookies", of: attacker) == 0, "a session cookie reached the attacker's registration")
        #expect(try await rows(live, "tokens", of: attacker) == 0, "a token reached the attacker's registration")
        #expect(try await user(live, token: token) == nil, "the attacker's registration got a user")
        let proxied = try await live.request("GET", path, token: token)
        #expect(
            proxied.status == 401 && proxied.json?["code"] as? String == "interaction_required",
            "the attacker's proxied call answered \(proxied.status) \(proxied.text.prefix(200)), not 401 interaction_required")
    }

    /// Signs in on the simulator authorization server's login page.
    static func signInAtTheAuthorizationServer(_ browser: WebDriverSession, _ user: String, _ password: String, _ expected: String) async throws {
        try await browser.sendKeys(user, to: try await browser.find("#username", "the authorization server's login page (\(expected))"))
        try await browser.sendKeys(password, to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#login"))
    }

    /// Signs in on SimpleSAMLphp's login page.
    static func signInAtTheIdP(_ browser: WebDriverSession, _ fixture: SAMLFixture, _ user: String, _ password: String) async throws {
        let field = try await browser.find("#username", "SimpleSAMLphp's login page", diagnosis: { fixture.diagnosis })
        try await browser.sendKeys(user, to: field)
        try await browser.sendKeys(password, to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#submit_button"))
    }

    // MARK: 1. the phishing case

    /// The victim, signed in at SimpleSAMLphp, opens the attacker's genuine flow URL: the browser
    /// stays on Parley's confirmation page, the IdP and the SP see no request, and nothing
    /// reaches the attacker's registration. The same browser, continuing a flow, would have been
    /// signed in by the IdP without a password (a control registration shows it).
    @Test func phishingWithASessionAtTheSAMLIdentityProviderGoesNowhere() async throws {
        let port = try FreePort.find()
        let publicURL = "http://127.0.0.1:\(port)"
        try await SAMLFixture.with(publicURL: publicURL, destination: "realsaml") { fixture in
            var options = LiveOptions()
            options.port = port
            let spec = Self.samlDestination(fixture, certificate: nil)
            try await withLiveParley(destinations: { _ in [spec] }, options: options) { live in
                let (_, victim) = try await live.register("realsaml", credentials: false)
                let own = try await Self.challenged(live, "/v1/proxy/api/data", token: victim, kind: "saml2")
                let (attackerID, attacker) = try await live.register("realsaml", credentials: false, extra: ["deviceModel": "Pixel 8"])
                let lure = try await Self.startFlow(live, token: attacker)
                let (_, control) = try await live.register("realsaml", credentials: false)
                let controlFlow = try await Self.startFlow(live, token: control)

                try await ChromeDriver.withSession { browser in
                    // The victim's own sign-in leaves a session at the IdP in this browser.
                    try await browser.openFlow(own.url)
                    try await Self.signInAtTheIdP(browser, fixture, "alice", "wonderland")
                    try await browser.reach(
                        publicURL + "/flows/\(own.id)/done", "the victim's own flow's done page", diagnosis: { fixture.diagnosis })
                    // Access log lines are written once an answer is sent: wait (bounded) for the ACS's.
                    #expect(await fixture.eventually { $0.acsPosts > 0 }, "the SP's log shows no ACS post of the victim's own sign-in")
                    let idpRequests = fixture.idpRequests()
                    let acsPosts = fixture.acsPosts

                    try await Self.expectConfirmationPageOnly(browser, live, flowURL: lure.url)
                    #expect(
                        fixture.idpRequests() == idpRequests,
                        "opening the flow URL reached the IdP: \(fixture.idpRequests() - idpRequests) request(s)")
                    #expect(fixture.acsPosts == acsPosts, "a SAMLResponse reached the SP")

                    // The premise: this browser's IdP session signs a confirmed flow in without a password.
                    let logins = fixture.idpRequests(to: "/module.php/core/loginuserpass.php")
                    let sso = fixture.idpRequests(to: "/saml2/idp/SSOService.php")
                    try await browser.openFlow(controlFlow.url)
                    try await browser.reach(
                        publicURL + "/flows/\(controlFlow.id)/done", "the control flow's done page, signed in by the IdP session",
                        diagnosis: { fixture.diagnosis })
                    #expect(fixture.idpRequests(to: "/saml2/idp/SSOService.php") > sso)
                    #expect(
                        fixture.idpRequests(to: "/module.php/core/loginuserpass.php") == logins,
                        "the IdP asked for a password: the browser had no IdP session, so the check above shows nothing")
                }
                let lureStatus = try await live.request("GET", "/v1/flows/\(lure.id)", token: attacker)
                #expect(lureStatus.json?["status"] as? String == "pending")
                #expect((try await Self.ended(live, controlFlow.id, token: control))["status"] as? String == "completed")
                try await Self.expectNothingReached(live, attacker: attackerID, token: attacker, path: "/v1/proxy/api/data")
            }
        }
    }

    /// The victim, signed in at the simulator's authorization server, opens the attacker's genuine
    /// flow URL: the browser stays on Parley's confirmation page, the AS sees no authorization
    /// request, and nothing reaches the attacker's registration. The browser's AS session is live:
    /// a bare authorization request is answered at once (a control).
    @Test func phishingWithASessionAtTheAuthorizationServerGoesNowhere() async throws {
        try await withLiveParley(destinations: { [Self.openIDDestination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (_, victim) = try await live.register("as", credentials: false)
            let own = try await Self.challenged(live, "/v1/proxy/oauth-api/data", token: victim, kind: "oauth2")
            let (attackerID, attacker) = try await live.register("as", credentials: false, extra: ["deviceModel": "Pixel 8"])
            let lure = try await Self.startFlow(live, token: attacker)
            let simulator = live.simulator
            let authorizeRequests = { simulator.requests(route: "GET /oauth/authorize") + simulator.requests(route: "POST /oauth/authorize") }

            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(own.url)
                try await Self.signInAtTheAuthorizationServer(browser, "alice", "wonderland", "the victim's own flow")
                try await browser.reach(live.baseURL + "/flows/\(own.id)/done", "the victim's own flow's done page")
                let authorizations = authorizeRequests()
                let tokenCalls = simulator.oauth.tokenCalls
                #expect(authorizations > 0, "the simulator counted no authorization request of the victim's own sign-in")

                try await Self.expectConfirmationPageOnly(browser, live, flowURL: lure.url)
                #expect(authorizeRequests() == authorizations, "opening the flow URL reached the authorization server")
                #expect(simulator.oauth.tokenCalls == tokenCalls)

                // The premise: this browser's AS session answers an authorization request at once.
                let silent = simulator.oauth.silentAuthorizations
                let callback = PercentEncoding.encodeForm([("redirect_uri", live.baseURL + "/callback/oauth2")])
                try await browser.navigate(
                    to: "http://127.0.0.1:\(live.simulatorPort)/oauth/authorize?response_type=code&client_id=parley-public&\(callback)"
                        + "&code_challenge=\(String(repeating: "c", count: 43))&code_challenge_method=S256&state=control")
                #expect(
                    simulator.oauth.silentAuthorizations == silent + 1,
                    "the browser has no session at the authorization server, so the check above shows nothing")
            }
            let lureStatus = try await live.request("GET", "/v1/flows/\(lure.id)", token: attacker)
            #expect(lureStatus.json?["status"] as? String == "pending")
            try await Self.expectNothingReached(live, attacker: attackerID, token: attacker, path: "/v1/proxy/oauth-api/data")
        }
    }

    /// The victim who does press the button on the attacker's page meets the authorization
    /// server's login page (`prompt=login`), not a silent sign-in by their AS session.
    @Test func aConfirmedFlowMakesTheAuthorizationServerAskForTheLoginAgain() async throws {
        try await withLiveParley(destinations: { [Self.openIDDestination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (_, victim) = try await live.register("as", credentials: false)
            let own = try await Self.challenged(live, "/v1/proxy/oauth-api/data", token: victim, kind: "oauth2")
            let (attackerID, attacker) = try await live.register("as", credentials: false)
            let lure = try await Self.startFlow(live, token: attacker)
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(own.url)
                try await Self.signInAtTheAuthorizationServer(browser, "alice", "wonderland", "the victim's own flow")
                try await browser.reach(live.baseURL + "/flows/\(own.id)/done", "the victim's own flow's done page")
                let silent = live.simulator.oauth.silentAuthorizations
                let pages = live.simulator.oauth.authorizePages

                try await browser.openFlow(lure.url)
                try await browser.find("#username", "the authorization server's login page despite the session")
                let at = try await browser.currentURL()
                #expect(at.hasPrefix("http://127.0.0.1:\(live.simulatorPort)/oauth/authorize?"))
                #expect(at.contains("prompt=login"), "the authorization request does not carry prompt=login: \(at)")
                #expect(live.simulator.oauth.silentAuthorizations == silent, "the AS session signed the attacker's flow in silently")
                #expect(live.simulator.oauth.authorizePages == pages + 1)
            }
            try await Self.expectNothingReached(live, attacker: attackerID, token: attacker, path: "/v1/proxy/oauth-api/data")
        }
    }

    /// The victim opens the attacker's Basic-form flow URL: the confirmation page, no credentials
    /// form, no request upstream, and nothing in the attacker's registration.
    @Test func phishingWithTheBasicFormGoesNowhere() async throws {
        let destination: @Sendable (String) -> [DestinationSpec] = { url in
            var spec = DestinationSpec(name: "sim", url: url, basic: .init(form: true))
            spec.displayName = "Simulated Sales (SMP)"
            return [spec]
        }
        try await withLiveParley(destinations: destination, options: LiveOptions(fixedPorts: true)) { live in
            let (attackerID, attacker) = try await live.register("sim", credentials: false, extra: ["deviceModel": "Pixel 8"])
            let lure = try await Self.startFlow(live, token: attacker)
            let upstream = live.simulator.requestsByRoute
            try await ChromeDriver.withSession { browser in
                try await Self.expectConfirmationPageOnly(browser, live, flowURL: lure.url)
                #expect(try await browser.pageSource().contains("Simulated Sales (SMP)"), "the page does not say where the sign-in goes")
            }
            #expect(live.simulator.requestsByRoute == upstream, "opening the flow URL reached the upstream")
            let id = try #require(UUID(uuidString: attackerID))
            let credentials = try await live.store.query("SELECT credentials_sealed IS NULL AS none FROM registrations WHERE id = \(id)")
            #expect(try credentials[0].bool("none"), "credentials reached the attacker's registration")
            try await Self.expectNothingReached(live, attacker: attackerID, token: attacker, path: "/v1/proxy/api/data")
        }
    }

    // MARK: 2. a verified user

    /// Registrations with an identity token for alice: her flow goes straight to the authorization
    /// server (no confirmation page) and completes; a flow in which bob signs in ends
    /// `identity_mismatch`, the registration unchanged, and the audit log says so (issuers only).
    @Test func aVerifiedUserGoesStraightOnAndSomebodyElseIsRefused() async throws {
        try await withLiveParley(
            destinations: { [Self.openIDDestination($0, identityRequired: true)] }, options: LiveOptions(fixedPorts: true),
            adjust: Self.simulatorIdentityProvider
        ) { live in
            let simulatorURL = "http://127.0.0.1:\(live.simulatorPort)"
            let anonymous = try await live.json("POST", "/v1/registrations", ["destination": "as"])
            #expect(anonymous.status == 403, "a registration without an identity token: \(anonymous.status) \(anonymous.text.prefix(200))")

            let created = try await live.json(
                "POST", "/v1/registrations", ["destination": "as", "identityToken": try await Self.identityToken(live, subject: "alice")])
            #expect(created.status == 201, "registration with alice's identity token: \(created.status) \(created.text.prefix(300))")
            let user = created.json?["user"] as? [String: Any]
            #expect(user?["issuer"] as? String == simulatorURL && user?["subject"] as? String == "alice" && user?["verified"] as? Bool == true)
            let token = try #require(created.json?["clientToken"] as? String)
            let (otherID, other) = try await live.register(
                "as", credentials: false, extra: ["identityToken": try await Self.identityToken(live, subject: "alice")])

            // Alice: straight from the flow URL to the authorization server.
            let flow = try await Self.challenged(live, "/v1/proxy/oauth-api/data", token: token, kind: "oauth2")
            try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: flow.url)
                let at = try await browser.reach(
                    simulatorURL + "/oauth/authorize",
                    "the authorization server straight from the flow URL (a verified user has no confirmation page)")
                #expect(!at.contains("prompt=login"), "a verified user's authorization request carries prompt=login")
                try await Self.signInAtTheAuthorizationServer(browser, "alice", "wonderland", "alice's flow")
                try await browser.reach(live.baseURL + "/flows/\(flow.id)/done", "alice's flow's done page")
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
            }
            #expect((try await Self.ended(live, flow.id, token: token))["status"] as? String == "completed")
            let data = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(data.status == 200 && data.json?["sub"] as? String == "alice", "alice's proxied call: \(data.status) \(data.text.prefix(200))")

            // Bob signs in for a registration of alice's.
            let before = try await Self.registrationState(live, otherID)
            let bobFlow = try await Self.challenged(live, "/v1/proxy/oauth-api/data", token: other, kind: "oauth2")
            try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: bobFlow.url)
                try await Self.signInAtTheAuthorizationServer(browser, "bob", "builder", "bob in alice's place")
                try await browser.reach(live.baseURL + "/flows/\(bobFlow.id)/done", "the done page of the flow bob signed in to")
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"failed\""))
            }
            try await Self.expectMismatch(live, bobFlow.id, token: other)
            #expect(try await Self.rows(live, "tokens", of: otherID) == 0, "bob's token reached alice's registration")
            #expect(try await Self.rows(live, "cookies", of: otherID) == 0, "a cookie of bob's sign-in reached alice's registration")
            #expect(try await Self.registrationState(live, otherID) == before, "the registration changed")
            let kept = try await Self.user(live, token: other)
            #expect(kept?["subject"] as? String == "alice" && kept?["verified"] as? Bool == true)
            let proxied = try await live.request("GET", "/v1/proxy/oauth-api/data", token: other)
            #expect(
                proxied.status == 401 && proxied.json?["code"] as? String == "interaction_required", "\(proxied.status) \(proxied.text.prefix(200))")
            let events = try await Self.auditEvents(live, "flow.identity_mismatch", registration: otherID)
            #expect(events.count == 1, "expected one flow.identity_mismatch audit event, found \(events.count)")
            let detail = String(describing: events.first?["detail"] ?? "")
            #expect(!detail.contains("bob") && !detail.contains("alice"), "the audit event names a subject: \(detail)")
        }
    }

    // MARK: 3. the first sign-in binds

    /// An unverified registration: alice's first sign-in (through the confirmation page) makes
    /// her its user (`verified: false`); a later flow in which bob signs in fails with
    /// `identity_mismatch`, and alice's token stays the one the proxy uses.
    @Test func theFirstOAuth2SignInBindsAndALaterOneAsSomebodyElseFails() async throws {
        try await withLiveParley(destinations: { [Self.openIDDestination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let simulatorURL = "http://127.0.0.1:\(live.simulatorPort)"
            let (id, token) = try await live.register("as", credentials: false)
            #expect(try await Self.user(live, token: token) == nil)

            let first = try await Self.challenged(live, "/v1/proxy/oauth-api/data", token: token, kind: "oauth2")
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(first.url)
                try await Self.signInAtTheAuthorizationServer(browser, "alice", "wonderland", "the first sign-in")
                try await browser.reach(live.baseURL + "/flows/\(first.id)/done", "the first flow's done page")
            }
            #expect((try await Self.ended(live, first.id, token: token))["status"] as? String == "completed")
            let bound = try await Self.user(live, token: token)
            #expect(bound?["issuer"] as? String == simulatorURL, "user.issuer: \(String(describing: bound?["issuer"]))")
            #expect(bound?["subject"] as? String == "alice" && bound?["verified"] as? Bool == false, "user: \(String(describing: bound))")
            #expect(try await Self.auditEvents(live, "registration.user_bound", registration: id).count == 1)
            let data = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(data.status == 200 && data.json?["sub"] as? String == "alice")

            // A later flow, in another browser, where bob signs in.
            let before = try await Self.registrationState(live, id)
            let tokens = try await Self.rows(live, "tokens", of: id)
            let later = try await Self.startFlow(live, token: token, kind: "oauth2")
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(later.url)
                try await Self.signInAtTheAuthorizationServer(browser, "bob", "builder", "bob's later sign-in")
                try await browser.reach(live.baseURL + "/flows/\(later.id)/done", "the later flow's done page")
            }
            try await Self.expectMismatch(live, later.id, token: token)
            #expect(try await Self.registrationState(live, id) == before, "the registration changed")
            #expect(try await Self.rows(live, "tokens", of: id) == tokens, "bob's token replaced or joined alice's")
            let still = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(
                still.status == 200 && still.json?["sub"] as? String == "alice",
                "the proxy now calls as \(still.json?["sub"] ?? still.status)")
            #expect(try await Self.auditEvents(live, "flow.identity_mismatch", registration: id).count == 1)
        }
    }

    // MARK: 4. SAML: the NameID of a verified response

    /// With the IdP's certificate configured, alice's first SAML sign-in makes her the user (issuer:
    /// the IdP's entity id); when her SP session has ended (an administrator revoked the jar), a
    /// flow in which bob signs in ends `identity_mismatch` at the web path: the SP never receives
    /// bob's SAMLResponse, and the registration gets no session.
    @Test func aSAMLSignInBindsAndTheServiceProviderNeverSeesSomebodyElse() async throws {
        let port = try FreePort.find()
        let publicURL = "http://127.0.0.1:\(port)"
        try await SAMLFixture.with(publicURL: publicURL, destination: "realsaml") { fixture in
            var options = LiveOptions()
            options.port = port
            let spec = Self.samlDestination(fixture, certificate: try fixture.idpCertificate())
            try await withLiveParley(destinations: { _ in [spec] }, options: options) { live in
                let (id, token) = try await live.register("realsaml", credentials: false)
                let first = try await Self.challenged(live, "/v1/proxy/api/data", token: token, kind: "saml2")
                try await ChromeDriver.withSession { browser in
                    try await browser.openFlow(first.url)
                    try await Self.signInAtTheIdP(browser, fixture, "alice", "wonderland")
                    try await browser.reach(publicURL + "/flows/\(first.id)/done", "alice's flow's done page", diagnosis: { fixture.diagnosis })
                }
                #expect((try await Self.ended(live, first.id, token: token))["status"] as? String == "completed")
                #expect(fixture.spSignIns("alice") == 1, "the SP's log does not show alice's one sign-in")
                #expect(await fixture.eventually { $0.acsPosts == 1 }, "the SP's log does not show the ACS post of alice's sign-in")
                let bound = try await Self.user(live, token: token)
                #expect(bound?["issuer"] as? String == fixture.idpEntityID, "user.issuer: \(String(describing: bound?["issuer"]))")
                #expect(bound?["subject"] as? String == "alice" && bound?["verified"] as? Bool == false, "user: \(String(describing: bound))")
                let data = try await live.request("GET", "/v1/proxy/api/data", token: token)
                #expect(data.status == 200 && data.json?["user"] as? String == "alice", "\(data.status) \(data.text.prefix(200))")

                // The SP session ends: an administrator revokes the registration's cookies; its user stays.
                let revoked = try await live.request(
                    "POST", "/admin/v1/revocations", headers: Self.admin + [("Content-Type", "application/json")],
                    body: Array(#"{"registrationId":"\#(id)","upstream":false}"#.utf8))
                #expect(revoked.status == 200, "\(revoked.status) \(revoked.text.prefix(200))")
                #expect(try await Self.rows(live, "cookies", of: id) == 0)
                #expect(try await Self.user(live, token: token)?["subject"] as? String == "alice")

                let later = try await Self.challenged(live, "/v1/proxy/api/data", token: token, kind: "saml2")
                let before = try await Self.registrationState(live, id)
                let acsPosts = fixture.acsPosts
                try await ChromeDriver.withSession { browser in
                    try await browser.openFlow(later.url)
                    try await Self.signInAtTheIdP(browser, fixture, "bob", "builder")
                    try await browser.reach(
                        publicURL + "/flows/\(later.id)/done", "the done page of the flow bob signed in to", diagnosis: { fixture.diagnosis })
                    #expect(try await browser.pageSource().contains("data-parley-flow-status=\"failed\""))
                }
                try await Self.expectMismatch(live, later.id, token: token)
                #expect(fixture.acsPosts == acsPosts, "bob's SAMLResponse reached the SP's ACS")
                #expect(fixture.spSignIns("bob") == 0, "the SP signed bob in")
                #expect(try await Self.rows(live, "cookies", of: id) == 0, "a cookie of bob's sign-in reached the registration")
                #expect(try await Self.registrationState(live, id) == before, "the registration changed")
                // The SP has no session for the registration: it challenges again.
                let proxied = try await live.request("GET", "/v1/proxy/api/data", token: token)
                #expect(
                    proxied.status == 401 && proxied.json?["code"] as? String == "interaction_required",
                    "\(proxied.status) \(proxied.text.prefix(200))")
                #expect(try await Self.auditEvents(live, "flow.identity_mismatch", registration: id).count == 1)
            }
        }
    }
}

extension HostedFlowLiveTests.SAMLFixture {
    private func log(_ name: String) -> String { (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? "" }

    /// Requests the IdP has served (lines of PHP's access log, `[200]: GET /path`), all or to `path`.
    func idpRequests(to path: String = "") -> Int {
        let log = log("idp.log")
        return ["GET", "POST"].reduce(0) { $0 + log.components(separatedBy: "]: \($1) \(path)").count - 1 }
    }

    /// Posts the SP's ACS has received (its access log).
    var acsPosts: Int { log("sp.log").components(separatedBy: "\"POST /saml/acs").count - 1 }

    /// Sign-ins the SP accepted for `user`.
    func spSignIns(_ user: String) -> Int { log("sp.log").components(separatedBy: ": signed-in user \(user) ").count - 1 }

    /// Whether `condition` holds of the logs within `timeout` (the servers write an access log line
    /// after the answer has gone out, so a test that has seen the answer may be a moment early).
    func eventually(within timeout: Duration = .seconds(5), _ condition: (Self) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !condition(self) {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }

    /// The IdP's signing certificate (PEM), as `start.sh` wrote it.
    func idpCertificate() throws -> String { try String(contentsOfFile: directory + "/idp.crt", encoding: .utf8) }

    /// The IdP's entity id (the `Issuer` of its responses).
    var idpEntityID: String { "http://127.0.0.1:\(idpPort)/saml2/idp/metadata.php" }
}
