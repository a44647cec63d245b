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
import UpstreamSimulator
import Testing

/// The confirmation page: for a registration without a verified user, the flow URL shows who
/// asked for the sign-in and moves nothing; only its button's post, from Parley's own page with
/// the page's token and this browser's cookie, continues the flow, for every kind the same way.
@Suite struct FlowConfirmationRouterTests {
    static let publicURL = "https://parley.example"
    static let issuer = "https://idp.example"
    static let jwks = "https://idp.example/keys"

    static func configuration() throws -> ParleyConfiguration {
        var sp = DestinationSpec(name: "sp", url: "https://sp.example/sp")
        sp.saml2 = .init()
        // Sign-ins that say who signed in (the IdP's certificate; userinfo below): only then
        // may a verified user skip the page.
        sp.saml2?.idpCertificates = [
            try String(contentsOfFile: packageRoot + "/Tests/Fixtures/saml/captured/simplesamlphp-idp.pem", encoding: .utf8)
        ]
        sp.displayName = "SAP Sales (SMP)"
        var oauth = DestinationSpec(name: "as", url: "https://api.example")
        oauth.displayName = "Expenses & Travel"
        oauth.oauth2 = .init(
            grant: "authorization_code", authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example/token",
            revocationEndpoint: nil, clientId: "parley", clientSecret: nil, clientAuthentication: nil, scopes: ["read"], scopeKeys: nil,
            challenge: nil)
        oauth.oauth2?.userinfoEndpoint = "https://as.example/userinfo"
        let form = DestinationSpec(name: "form", url: "https://form.example", basic: .init(form: true))
        // `oauth2.prompt` overrides the default for every registration: a value, or "" for none.
        var consent = oauth
        consent.name = "as-consent"
        consent.oauth2?.prompt = "consent select_account"
        var silent = oauth
        silent.name = "as-silent"
        silent.oauth2?.prompt = ""
        var anonymous = sp
        anonymous.name = "sp-anonymous"
        anonymous.saml2?.idpCertificates = nil
        var anonymousAS = oauth
        anonymousAS.name = "as-anonymous"
        anonymousAS.oauth2?.userinfoEndpoint = nil
        return ParleyConfiguration(
            server: .init(publicURL: publicURL), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [
                try sp.validated(), try oauth.validated(), try form.validated(), try consent.validated(), try silent.validated(),
                try anonymous.validated(), try anonymousAS.validated(),
            ],
            identityProviders: [IdentityProvider(issuer: issuer, jwksURI: jwks, audiences: ["parley"])])
    }

    /// The application on in-memory twins; `transport` records every upstream request.
    struct World {
        let signer: IdentityIssuer
        let transport: FakeTransport
        let flows = InMemoryFlows()
        let clock = TestClock()

        init() throws {
            let signer = try IdentityIssuer()
            self.signer = signer
            transport = FakeTransport { request in
                if request.url == FlowConfirmationRouterTests.jwks { return .text(200, String(decoding: signer.jwks, as: UTF8.self)) }
                return request.url.hasPrefix("https://form.example") && request.headers["Authorization"] == "Basic YWxpY2U6d29uZGVybGFuZA=="
                    ? .text(200, "{}") : .text(401, headers: ["WWW-Authenticate": "Basic realm=\"form\""])
            }
        }

        /// An identity token for alice from the listed identity provider.
        func identityToken() throws -> String {
            let now = Int(clock.now.timeIntervalSince1970)
            return try signer.token(["iss": FlowConfirmationRouterTests.issuer, "sub": "alice", "aud": "parley", "exp": now + 300])
        }

        /// Upstream requests other than the identity provider's keys.
        var upstreamRequests: [UpstreamRequest] { transport.requests.filter { $0.url != FlowConfirmationRouterTests.jwks } }

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            var dependencies = ParleyDependencies.inMemory(transport: transport, clock: clock)
            dependencies.flows = flows
            let app = try buildApplication(configuration: try FlowConfirmationRouterTests.configuration(), dependencies: dependencies, logger: quietLogger)
            try await app.test(.router) { client in try await body(client) }
        }

        func flow(_ id: String) -> FlowRecord? { flows.all.first { $0.idString == id } }
    }

    /// A registration (with what a client says about itself) and a proactive flow: (id, path of the flow URL).
    static func registrationWithFlow(
        _ client: any TestClientProtocol, _ destination: String, kind: String, extra: [String: Any] = [:], prefix: String = publicURL
    ) async throws -> (String, String) {
        var registration: [String: Any] = [
            "destination": destination, "deviceType": "Android", "deviceModel": "Pixel <8>", "userHint": "alice@example.com",
        ]
        for (name, value) in extra { registration[name] = value }
        let token = try await client.execute(uri: "/v1/registrations", method: .post, body: try RouterTests.body(registration)) { response in
            #expect(response.status == .created)
            return RouterTests.json(response.body)["clientToken"] as? String ?? ""
        }
        return try await client.execute(
            uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)"], body: try RouterTests.body(["kind": kind])
        ) { response in
            #expect(response.status == .created)
            let flow = RouterTests.json(response.body)
            return (flow["id"] as? String ?? "", String((flow["url"] as? String ?? "").dropFirst(prefix.count)))
        }
    }

    /// What a confirmation page hands its browser: the form's fields and the cookie.
    struct PageToken {
        let secret: String
        let token: String
        /// `parley_confirm=<nonce>`, as the browser sends it back.
        let cookie: String
    }

    static func pageToken(_ response: TestResponse) -> PageToken {
        let page = String(buffer: response.body)
        func field(_ name: String) -> String {
            guard let start = page.range(of: "name=\"\(name)\" value=\"") else { return "" }
            return String(page[start.upperBound...].prefix { $0 != "\"" })
        }
        let setCookie = response.headers[values: .setCookie].first { $0.hasPrefix(FlowConfirmation.cookieName + "=") } ?? ""
        return PageToken(secret: field("k"), token: field("token"), cookie: String(setCookie.split(separator: ";").first ?? ""))
    }

    /// Opens the flow URL (the confirmation page) and presses its button, as a browser would;
    /// `body` gets the answer to the post.
    @discardableResult
    static func confirm<T>(
        _ client: any TestClientProtocol, _ start: String, headers: HTTPFields = [:], _ body: @escaping (TestResponse) async throws -> T
    ) async throws -> T {
        let (id, page) = try await client.execute(uri: start, method: .get, headers: headers) { response in
            #expect(response.status == .ok, "the flow URL shows the confirmation page")
            #expect(String(buffer: response.body).contains("data-parley-confirm"))
            return (String(start.dropFirst("/flows/".count).prefix { $0 != "?" }), pageToken(response))
        }
        var post = headers
        post[.contentType] = "application/x-www-form-urlencoded"
        post[.cookie] = [headers[.cookie], page.cookie].compactMap { $0 }.joined(separator: "; ")
        return try await client.execute(
            uri: "/flows/\(id)/confirm", method: .post, headers: post, body: ByteBuffer(string: "k=\(page.secret)&token=\(page.token)"),
            testCallback: body)
    }

    /// Where an `onward` page sends the browser (`Refresh: 0; url=…`).
    static func onward(_ response: TestResponse) -> String? {
        guard response.status == .ok, let refresh = response.headers[HTTPField.Name("Refresh")!], refresh.hasPrefix("0; url=") else { return nil }
        return String(refresh.dropFirst("0; url=".count))
    }

    // MARK: the page

    @Test(arguments: [("sp", "saml2", "SAP Sales (SMP)"), ("as", "oauth2", "Expenses &amp; Travel"), ("form", "basic", "form")])
    func theFlowURLShowsWhoAskedAndMovesNothing(destination: String, kind: String, displayName: String) async throws {
        let world = try World()
        try await world.run { client in
            let (id, start) = try await Self.registrationWithFlow(client, destination, kind: kind)
            world.clock.advance(by: .seconds(150))
            let before = try #require(world.flow(id))
            for _ in 0..<2 {
                try await client.execute(uri: start, method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[.location] == nil)
                    #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                    #expect(response.headers[.contentSecurityPolicy] == Page.securityHeaders[.contentSecurityPolicy])
                    #expect(response.headers[.cacheControl] == "no-store")
                    let page = String(buffer: response.body)
                    for expected in [
                        "<html lang=\"en\">", "<h1>Sign in to \(displayName)?</h1>", "<dd id=\"destination\">\(displayName)</dd>",
                        "<dd id=\"device-type\">Android</dd>", "<dd id=\"device-model\">Pixel &lt;8&gt;</dd>",
                        "<dd id=\"user-hint\">alice@example.com</dd>", "<dd id=\"age\">2 minutes ago</dd>",
                        // What the app said about itself stands apart, marked as unchecked.
                        "<h2>What the app says about itself (Parley has not checked it)</h2>\n<dl class=\"requester claimed\" data-parley-unchecked>\n<dt>Device type</dt><dd id=\"device-type\">",
                        "<form method=\"post\" action=\"/flows/\(id)/confirm\" data-parley-confirm>",
                        "<button type=\"submit\">Continue to \(displayName)</button>", "data-parley-flow-kind=\"\(kind)\"",
                    ] {
                        #expect(page.contains(expected), "\(expected)")
                    }
                    #expect(!page.contains("<script") && !page.contains("style="))
                    let cookies = response.headers[values: .setCookie]
                    #expect(cookies.count == 1, "only the page's cookie, no binding to the upstream: \(cookies)")
                    for attribute in ["parley_confirm=", "Path=/flows/\(id)/confirm", "Max-Age=450", "HttpOnly", "SameSite=Strict", "Secure"] {
                        #expect(cookies.first?.contains(attribute) == true, "\(attribute)")
                    }
                }
            }
            #expect(world.flow(id) == before, "opening the flow URL changed the flow")
            #expect(world.upstreamRequests.isEmpty, "opening the flow URL contacted an upstream")
        }
    }

    @Test func aFinishedOrExpiredFlowAnswersAsBefore() async throws {
        let world = try World()
        try await world.run { client in
            let (id, start) = try await Self.registrationWithFlow(client, "as", kind: "oauth2")
            try await client.execute(uri: "/flows/\(id)?k=wrong", method: .get) { #expect($0.status == .notFound) }
            world.clock.advance(by: .seconds(Int64(FlowService.lifetime) + 1))
            try await client.execute(uri: start, method: .get) { response in
                #expect(response.status == .gone)
                #expect(String(buffer: response.body).contains("data-parley-error=\"flow_expired\""))
            }
        }
    }

    @Test func ageInWords() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let cases: [(TimeInterval, String, String)] = [
            (-5, "just now", "gerade eben"), (0, "just now", "gerade eben"), (59, "just now", "gerade eben"), (60, "1 minute ago", "vor 1 Minute"),
            (150, "2 minutes ago", "vor 2 Minuten"), (3599, "59 minutes ago", "vor 59 Minuten"), (3600, "1 hour ago", "vor 1 Stunde"),
            (7300, "2 hours ago", "vor 2 Stunden"), (86_400 * 3, "3 days ago", "vor 3 Tagen"), (.infinity, "just now", "gerade eben"),
        ]
        for (seconds, english, german) in cases {
            let age = PageAge(since: start, now: start.addingTimeInterval(seconds))
            #expect(PageCatalogs.embedded.age(age, .en) == english, "\(seconds)")
            #expect(PageCatalogs.embedded.age(age, .de) == german, "\(seconds)")
        }
    }

    /// A verified user goes straight on: the identity check protects the registration.
    @Test func aVerifiedUserSkipsThePage() async throws {
        let world = try World()
        try await world.run { client in
            for (destination, kind) in [("sp", "saml2"), ("as", "oauth2"), ("form", "basic")] {
                let (id, start) = try await Self.registrationWithFlow(client, destination, kind: kind, extra: ["identityToken": try world.identityToken()])
                try await client.execute(uri: start, method: .get) { response in
                    #expect(!String(buffer: response.body).contains("data-parley-confirm"), "\(kind)")
                    #expect(!response.headers[values: .setCookie].contains { $0.hasPrefix("parley_confirm=") }, "\(kind)")
                    switch kind {
                    case "saml2":
                        #expect(response.status == .seeOther)
                        #expect(response.headers[.location] == "https://parley.example/web/sp/SAMLAuthLauncher")
                        #expect(response.headers[values: .setCookie].contains { $0.hasPrefix("parley_flow=\(id).") })
                    case "oauth2":
                        #expect(response.status == .found)
                        #expect(response.headers[.location]?.hasPrefix("https://as.example/authorize?response_type=code") == true)
                        #expect(response.headers[.location]?.contains("prompt=") == false, "a verified user is sent without prompt")
                    default:
                        #expect(response.status == .ok)
                        #expect(String(buffer: response.body).contains("action=\"/flows/\(id)/credentials\""))
                    }
                }
            }
        }
    }

    /// Where a kind cannot say who signed in (saml2 without the IdP's certificates), the
    /// binding cannot protect even a verified user's registration: the page is shown.
    @Test func aVerifiedUserConfirmsWhereTheSignInNamesNobody() async throws {
        let world = try World()
        try await world.run { client in
            let (_, start) = try await Self.registrationWithFlow(
                client, "sp-anonymous", kind: "saml2", extra: ["identityToken": try world.identityToken()])
            try await client.execute(uri: start, method: .get) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains("data-parley-confirm"))
            }
            // The same for oauth2 without an id_token or userinfo, whose request asks for a fresh sign-in too.
            let (_, oauthStart) = try await Self.registrationWithFlow(
                client, "as-anonymous", kind: "oauth2", extra: ["identityToken": try world.identityToken()])
            let location = try await Self.confirm(client, oauthStart) { Self.onward($0) }
            #expect(location?.hasSuffix("&prompt=login") == true, "\(String(describing: location))")
        }
    }

    /// `oauth2.prompt` says what every registration's authorization request carries.
    @Test func oauth2PromptOverridesTheDefault() async throws {
        let world = try World()
        try await world.run { client in
            let cases: [(String, Bool, String?)] = [
                ("as", false, "login"), ("as", true, nil), ("as-consent", false, "consent select_account"), ("as-consent", true, "consent select_account"),
                ("as-silent", false, nil), ("as-silent", true, nil),
            ]
            for (destination, verified, prompt) in cases {
                let extra: [String: Any] = verified ? ["identityToken": try world.identityToken()] : [:]
                let (_, start) = try await Self.registrationWithFlow(client, destination, kind: "oauth2", extra: extra)
                let answer = { (response: TestResponse) -> String? in verified ? response.headers[.location] : Self.onward(response) }
                let location = try #require(
                    verified ? try await client.execute(uri: start, method: .get, testCallback: answer) : try await Self.confirm(client, start, answer),
                    "\(destination), verified: \(verified)")
                let query = try #require(URLComponents(string: location)?.queryItems)
                let sent = query.filter { $0.name == "prompt" }.map(\.value)
                #expect(sent == (prompt.map { [$0] } ?? []), "\(destination), verified: \(verified): \(location)")
            }
        }
    }

    /// A user bound by a first sign-in is not verified: the next flow asks again.
    @Test func aUserBoundByAFirstSignInStillConfirms() async throws {
        let world = try World()
        try await world.run { client in
            let token = try await client.execute(
                uri: "/v1/registrations", method: .post, body: try RouterTests.body(["destination": "form"])
            ) { RouterTests.json($0.body)["clientToken"] as? String ?? "" }
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            for round in 1...2 {
                let (id, start) = try await client.execute(uri: "/v1/flows", method: .post, headers: auth, body: try RouterTests.body(["kind": "basic"])) {
                    response in
                    let flow = RouterTests.json(response.body)
                    return (flow["id"] as? String ?? "", String((flow["url"] as? String ?? "").dropFirst(Self.publicURL.count)))
                }
                try await Self.confirm(client, start) { response in
                    #expect(String(buffer: response.body).contains("action=\"/flows/\(id)/credentials\""), "round \(round)")
                }
                let secret = String(start.split(separator: "k=").last ?? "")
                try await client.execute(
                    uri: "/flows/\(id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: "k=\(secret)&username=alice&password=wonderland")
                ) { #expect($0.status == .seeOther) }
                #expect(world.flow(id)?.status == .completed, "round \(round)")
                let user = try await client.execute(uri: "/v1/registrations/me", method: .get, headers: auth) {
                    RouterTests.json($0.body)["user"] as? [String: Any]
                }
                #expect(user?["verified"] as? Bool == false && user?["subject"] as? String == "alice", "\(String(describing: user))")
            }
        }
    }

    // MARK: the post

    @Test func aPostWithoutTheRightTokenOrFromAnotherSiteMovesNothing() async throws {
        let world = try World()
        try await world.run { client in
            let (id, start) = try await Self.registrationWithFlow(client, "as", kind: "oauth2")
            let (otherID, otherStart) = try await Self.registrationWithFlow(client, "as", kind: "oauth2")
            let page = try await client.execute(uri: start, method: .get) { Self.pageToken($0) }
            let other = try await client.execute(uri: otherStart, method: .get) { Self.pageToken($0) }
            let newer = try await client.execute(uri: start, method: .get) { Self.pageToken($0) }
            #expect(page.token.count > 100 && page.cookie.count > 40 && page.token != newer.token && page.cookie != newer.cookie)
            let before = (try #require(world.flow(id)), try #require(world.flow(otherID)))

            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            func post(_ body: String, cookie: String?, extra: HTTPFields = [:]) async throws -> TestResponse {
                var headers = form
                if let cookie { headers[.cookie] = cookie }
                for field in extra { headers[field.name] = field.value }
                return try await client.execute(uri: "/flows/\(id)/confirm", method: .post, headers: headers, body: ByteBuffer(string: body))
            }
            let refused: [(String, String, String?, HTTPFields, HTTPResponse.Status)] = [
                ("no token", "k=\(page.secret)", page.cookie, [:], .forbidden),
                ("an empty token", "k=\(page.secret)&token=", page.cookie, [:], .forbidden),
                ("a made-up token", "k=\(page.secret)&token=\(String(repeating: "ab", count: 70))", page.cookie, [:], .forbidden),
                ("a token that is not hex", "k=\(page.secret)&token=zz\(page.token.dropFirst(2))", page.cookie, [:], .forbidden),
                ("a huge token", "k=\(page.secret)&token=\(String(repeating: "a", count: 4000))", page.cookie, [:], .forbidden),
                ("no cookie", "k=\(page.secret)&token=\(page.token)", nil, [:], .forbidden),
                ("the cookie of a newer page", "k=\(page.secret)&token=\(page.token)", newer.cookie, [:], .forbidden),
                ("another flow's token and cookie", "k=\(page.secret)&token=\(other.token)", other.cookie, [:], .forbidden),
                ("from another origin", "k=\(page.secret)&token=\(page.token)", page.cookie, [.origin: "https://evil.example"], .forbidden),
                (
                    "from another site", "k=\(page.secret)&token=\(page.token)", page.cookie, [HTTPField.Name("Sec-Fetch-Site")!: "cross-site"],
                    .forbidden
                ),
                ("a wrong secret", "k=wrong&token=\(page.token)", page.cookie, [:], .notFound),
                ("no secret", "token=\(page.token)", page.cookie, [:], .notFound),
            ]
            for (what, body, cookie, extra, status) in refused {
                let response = try await post(body, cookie: cookie, extra: extra)
                #expect(response.status == status, "\(what)")
                #expect(response.headers[.location] == nil && response.headers[HTTPField.Name("Refresh")!] == nil, "\(what)")
                #expect(response.headers[.contentType] == "text/html; charset=utf-8", "\(what)")
            }
            // A GET of the post's path is not a confirmation.
            #expect(try await client.execute(uri: "/flows/\(id)/confirm?k=\(page.secret)&token=\(page.token)", method: .get).status == .methodNotAllowed)
            #expect(world.flow(id) == before.0 && world.flow(otherID) == before.1, "a refused post moved a flow")
            #expect(world.upstreamRequests.isEmpty)

            // The newest page's token with its cookie is the one that goes on.
            let response = try await post("k=\(newer.secret)&token=\(newer.token)", cookie: newer.cookie)
            #expect(Self.onward(response)?.hasPrefix("https://as.example/authorize?") == true)
        }
    }

    @Test func theRightPostContinuesEachKindAsItsStartPageDid() async throws {
        let world = try World()
        try await world.run { client in
            // saml2: the browser is bound and goes into the web path (an onward page, not a redirect).
            let (samlID, samlStart) = try await Self.registrationWithFlow(client, "sp", kind: "saml2")
            let binding = try await Self.confirm(client, samlStart) { response in
                #expect(response.status == .ok)
                #expect(Self.onward(response) == "https://parley.example/web/sp/SAMLAuthLauncher")
                #expect(String(buffer: response.body).contains("<a class=\"button\" href=\"https://parley.example/web/sp/SAMLAuthLauncher\">"))
                #expect(response.headers[.contentSecurityPolicy] == Page.securityHeaders[.contentSecurityPolicy])
                let setCookie = response.headers[values: .setCookie].first { $0.hasPrefix("parley_flow=") } ?? ""
                #expect(setCookie.hasPrefix("parley_flow=\(samlID).") && setCookie.contains("Path=/web/sp/"))
                return String(setCookie.split(separator: ";").first ?? "")
            }
            #expect(world.upstreamRequests.isEmpty, "the confirmation itself contacts no upstream")
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher", method: .get, headers: [.cookie: binding]) { response in
                #expect(response.status == .unauthorized, "the bound browser reaches the upstream")
            }
            #expect(world.upstreamRequests.count == 1)

            // oauth2: onward to the authorization endpoint with a fresh state and PKCE.
            let (oauthID, oauthStart) = try await Self.registrationWithFlow(client, "as", kind: "oauth2")
            try await Self.confirm(client, oauthStart) { response in
                let location = try #require(Self.onward(response))
                #expect(location.hasPrefix("https://as.example/authorize?response_type=code&client_id=parley"))
                #expect(location.contains("code_challenge_method=S256") && location.contains("state="))
                #expect(location.hasSuffix("&prompt=login"), "a registration without a verified user asks the AS for a fresh sign-in: \(location)")
            }
            #expect(world.flow(oauthID)?.kindState != nil, "the confirmed start minted the PKCE verifier")

            // basic: the credentials form, which then signs in.
            let (formID, formStart) = try await Self.registrationWithFlow(client, "form", kind: "basic")
            let secret = String(formStart.split(separator: "k=").last ?? "")
            try await Self.confirm(client, formStart) { response in
                #expect(response.status == .ok)
                #expect(Self.onward(response) == nil)
                let page = String(buffer: response.body)
                #expect(page.contains("<h1>Sign in to form</h1>") && page.contains("action=\"/flows/\(formID)/credentials\""))
            }
            try await client.execute(
                uri: "/flows/\(formID)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "k=\(secret)&username=alice&password=wonderland")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(formID)/done")
            }
            #expect(world.flow(formID)?.status == .completed)

            // A finished flow's confirmation leads to its done page, as its flow URL does.
            try await client.execute(
                uri: "/flows/\(formID)/confirm", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "k=\(secret)&token=x")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(formID)/done")
            }
        }
    }
}
