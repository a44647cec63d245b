import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Testing
import UpstreamSimulator

/// saml2 and otp flows against the simulator's SMP-like SAML2 service provider (with its
/// mock identity provider and OTP), through real Parley instances and headless Chromium.
@Suite(.serialized) struct SimulatedSAMLTests {
    /// How the simulated SP scopes its session cookie: today's `Path=/sp`, which ignores the
    /// proxy, and the prefix-aware scopes of real SPs behind a proxy (`Path=/web/{destination}`,
    /// the same with a trailing `/` and `Domain=<public host>`). Parley has to work with each.
    struct SPCookie: Sendable, CustomTestStringConvertible {
        let scope: SPCookieScope
        let domain: Bool

        static let cases = [
            SPCookie(scope: .mount, domain: false),
            SPCookie(scope: .forwardedPrefix, domain: false),
            SPCookie(scope: .forwardedPrefixSlash, domain: true),
        ]

        var testDescription: String { "SP cookie \(scope.rawValue)" + (domain ? " + Domain" : "") }

        /// Live options with the simulator's SP scoping its cookie this way.
        func applied(to options: LiveOptions) -> LiveOptions {
            var options = options
            options.simulator.spCookieScope = scope
            options.simulator.spCookieDomain = domain
            return options
        }
    }

    static func destinations(_ url: String) -> [DestinationSpec] {
        var sp = DestinationSpec(name: "sp", url: url + "/sp", csrf: true, smp: .init(appId: "com.example.app"))
        sp.saml2 = .init()
        sp.otp = .init()
        var plain = DestinationSpec(name: "spapi", url: url + "/sp")
        plain.saml2 = .init()
        plain.otp = .init()
        var basicOTP = DestinationSpec(name: "botp", url: url + "/basic-otp", basic: .init())
        basicOTP.otp = .init()
        return [sp, plain, basicOTP]
    }

    /// The ACS URL of the simulated SP as every instance shows it, registered at the IdP.
    static func registerACS(_ live: LiveParley, destinations: [String] = ["sp", "spapi"]) {
        let instances = [live] + live.others
        live.simulator.saml.registeredACSURLs = instances.flatMap { instance in
            destinations.map { instance.baseURL + "/web/\($0)/saml/acs" }
        }
    }

    /// Signs in at the mock IdP in the browser that is on its login page.
    static func signIn(_ browser: WebDriverSession, password: String = "wonderland") async throws {
        try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
        try await browser.sendKeys(password, to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#login"))
    }

    /// What the simulator saw since the browser signed in at the IdP (`challengesBefore`: the
    /// SP's AuthnRequests until then), for a sign-in that did not end where expected: a new
    /// challenge after an accepted assertion means the session cookie the ACS set
    /// (`SP_SESSION`) did not come back to the SP.
    static func signInDiagnosis(_ simulator: SimulatorState, challengesBefore: Int) -> String {
        let accepted = simulator.saml.assertionsAccepted
        let challenges = simulator.saml.authnRequestsIssued - challengesBefore
        let seen = "since the sign-in the SP accepted \(accepted) assertion(s) and challenged \(challenges) more time(s)"
        return accepted >= 1 && challenges >= 1 ? seen + ": its session cookie SP_SESSION did not come back to it" : seen
    }

    /// What the simulator's OTP stage saw, for a passcode step that did not end where expected:
    /// a passcode the SP never checked was posted without the session cookie (the SP answers
    /// `403` "no session").
    static func passcodeDiagnosis(_ simulator: SimulatorState) -> String {
        let otp = simulator.otp
        return "the SP rejected \(otp.rejectedPasscodes) passcode(s) and accepted \(otp.verifications)"
    }

    /// Retries a proxied call for a short, bounded time: another instance's per-instance
    /// caches (cookie jar, client token) may hold a view up to 500 ms old.
    static func eventually(_ live: LiveParley, _ path: String, token: String, status: Int = 200) async throws -> RawHTTPResponse {
        let deadline = ContinuousClock.now + .seconds(3)
        while true {
            let response = try await live.request("GET", path, token: token)
            if response.status == status || ContinuousClock.now > deadline { return response }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    @Test(arguments: SPCookie.cases)
    func smpRegistrationBehindSAMLCompletesOnASecondInstance(cookie: SPCookie) async throws {
        var options = LiveOptions()
        options.instances = 2
        options.fixedPorts = true
        try await withLiveParley(destinations: Self.destinations, options: cookie.applied(to: options)) { a in
            let b = try #require(a.others.first)
            Self.registerACS(a)
            let registered = try await a.json("POST", "/v1/registrations", ["destination": "sp", "deviceType": "phone"])
            #expect(registered.status == 201)
            #expect(registered.json?["status"] as? String == "login_required")
            #expect(registered.json?["appcid"] is NSNull)
            let token = try #require(registered.json?["clientToken"] as? String)
            let flow = try #require(registered.json?["flow"] as? [String: Any])
            #expect(flow["kind"] as? String == "saml2")
            let flowID = try #require(flow["id"] as? String)
            let onB = try #require(flow["url"] as? String).replacingOccurrences(of: a.baseURL, with: b.baseURL)

            // Bounded below RawHTTP's 30 s socket timeout, so a flow that never completes ends
            // the long-poll with its answer (still pending) rather than a socket error.
            async let waited = a.request("GET", "/v1/flows/\(flowID)?wait=28", token: token)
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(onB)
                _ = try await browser.findElement(css: "#username")
                #expect(try await browser.currentURL().contains("/idp/"))
                let challenges = a.simulator.saml.authnRequestsIssued
                try await Self.signIn(browser)
                try await browser.reach(
                    b.baseURL + "/flows/\(flowID)/done", "the flow's done page on B after signing in (\(cookie.testDescription))",
                    diagnosis: { Self.signInDiagnosis(a.simulator, challengesBefore: challenges) })
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
            }
            // The long-poll on A returns once the flow completed on B, with the registration active.
            let long = try await waited
            #expect(long.json?["status"] as? String == "completed")
            let me = try await a.request("GET", "/v1/registrations/me", token: token)
            #expect(me.json?["status"] as? String == "active")
            #expect((me.json?["appcid"] as? String)?.isEmpty == false)
            #expect(a.simulator.saml.assertionsAccepted == 1)

            // Proxied calls on either instance succeed on the captured session, CSRF included.
            let data = try await Self.eventually(a, "/v1/proxy/api/data", token: token)
            #expect(data.status == 200)
            #expect(data.json?["via"] as? String == "saml")
            #expect(data.header("Set-Cookie") == nil)
            let posted = try await b.request("POST", "/v1/proxy/csrf/items", token: token, headers: [("Content-Type", "application/json")], body: Array("{}".utf8))
            #expect((200..<300).contains(posted.status), "CSRF-protected POST on the SAML session: \(posted.status)")
            #expect(posted.header("X-CSRF-Token") == nil)
        }
    }

    @Test(arguments: SPCookie.cases)
    func samlThenOTPInTheSameBrowserFlow(cookie: SPCookie) async throws {
        var options = LiveOptions()
        options.fixedPorts = true
        options.simulator.spOTP = .afterSAML
        try await withLiveParley(destinations: Self.destinations, options: cookie.applied(to: options)) { live in
            Self.registerACS(live)
            let (_, token) = try await live.register("spapi", credentials: false)
            let challenged = try await live.request("GET", "/v1/proxy/api/data", token: token)
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            #expect(flow["kind"] as? String == "saml2")
            let flowID = try #require(flow["id"] as? String)
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(try #require(flow["url"] as? String))
                _ = try await browser.findElement(css: "#username")
                let challenges = live.simulator.saml.authnRequestsIssued
                try await Self.signIn(browser)
                // The second factor follows in the same browser flow, through the web path.
                try await browser.reach(
                    live.baseURL + "/web/spapi/otp", "the SP's passcode form after signing in (\(cookie.testDescription))",
                    diagnosis: { Self.signInDiagnosis(live.simulator, challengesBefore: challenges) })
                #expect(try await browser.currentURL().contains("redirecttooriginalurl=false"))
                let wrong = live.simulator.otp.currentCode(user: "alice") == "000000" ? "111111" : "000000"
                try await browser.sendKeys(wrong, to: try await browser.findElement(css: "input[name=passcode]"))
                try await browser.click(try await browser.findElement(css: "button[type=submit], input[type=submit]"))
                // The answer to the wrong passcode is the form again, with its error line.
                try await browser.find(
                    "p#error", "the passcode form again with its error line after a wrong passcode (\(cookie.testDescription))",
                    diagnosis: { Self.passcodeDiagnosis(live.simulator) })
                let pending = try await live.request("GET", "/v1/flows/\(flowID)", token: token)
                #expect(pending.json?["status"] as? String == "pending", "a wrong passcode completed the flow")
                #expect(live.simulator.otp.rejectedPasscodes == 1)
                try await browser.sendKeys(live.simulator.otp.currentCode(user: "alice"), to: try await browser.findElement(css: "input[name=passcode]"))
                try await browser.click(try await browser.findElement(css: "button[type=submit], input[type=submit]"))
                try await browser.reach(
                    live.baseURL + "/flows/\(flowID)/done", "the flow's done page after the right passcode (\(cookie.testDescription))",
                    diagnosis: { Self.passcodeDiagnosis(live.simulator) })
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
            }
            let data = try await Self.eventually(live, "/v1/proxy/api/data", token: token)
            #expect(data.status == 200)
            #expect(live.simulator.otp.verifications == 1)
        }
    }

    /// An SMP whose second factor guards the registration endpoint itself: the saml2 flow
    /// completes, Parley's `POST …/Connections` then meets the OTP challenge, and the registration
    /// waits on an `otp` flow of its own (never on the completed one) until it ends with its APPCID.
    @Test func aSecondFactorAtTheRegistrationEndpointGetsAFlowOfItsOwnAndEndsWithAnAPPCID() async throws {
        var options = LiveOptions()
        options.fixedPorts = true
        options.simulator.spOTP = .forRegistration
        try await withLiveParley(destinations: Self.destinations, options: options) { live in
            Self.registerACS(live)
            let registered = try await live.json("POST", "/v1/registrations", ["destination": "sp", "deviceType": "phone"])
            #expect(registered.status == 201 && registered.json?["status"] as? String == "login_required", "\(registered.text)")
            let token = try #require(registered.json?["clientToken"] as? String)
            let saml = try #require(registered.json?["flow"] as? [String: Any])
            #expect(saml["kind"] as? String == "saml2")

            var browser = PlainBrowser()
            var page = try await browser.open(try #require(saml["url"] as? String))
            if page.response.text.contains("data-parley-confirm") { page = try await browser.submit(page) }
            page = try await browser.submit(page)  // the SP's SAML request, to the IdP
            page = try await browser.submit(page, [("username", "alice"), ("password", "wonderland")])
            page = try await browser.submit(page)  // the IdP's response, to the ACS through Parley
            #expect(page.response.text.contains("data-parley-flow-status=\"completed\""), "\(page.url) \(page.response.text.prefix(300))")

            // The registration endpoint asked for the second factor: a new flow, and the app has it.
            let waiting = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(waiting.json?["status"] as? String == "login_required", "\(waiting.text)")
            let otp = try #require(waiting.json?["flow"] as? [String: Any], "\(waiting.text)")
            #expect(otp["kind"] as? String == "otp" && otp["status"] as? String == "pending", "\(otp)")
            #expect(otp["id"] as? String != saml["id"] as? String)
            #expect(waiting.json?["appcid"] is NSNull)

            page = try await browser.open(try #require(otp["url"] as? String))
            if page.response.text.contains("data-parley-confirm") { page = try await browser.submit(page) }
            #expect(page.url.contains("/web/sp/otp"), "\(page.url)")
            page = try await browser.submit(page, [("passcode", live.simulator.otp.currentCode(user: "alice"))])
            #expect(page.response.text.contains("data-parley-flow-status=\"completed\""), "\(page.url) \(page.response.text.prefix(300))")
            let me = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(me.json?["status"] as? String == "active", "\(me.text)")
            #expect((me.json?["appcid"] as? String)?.isEmpty == false, "\(me.text)")
            #expect(live.simulator.otp.verifications == 1)
        }
    }

    @Test func basicThenOTPIsAnOTPFlowThatTheCallbackCompletes() async throws {
        var options = LiveOptions()
        options.fixedPorts = true
        try await withLiveParley(destinations: Self.destinations, options: options) { live in
            let (_, token) = try await live.register("botp")
            let challenged = try await live.request("GET", "/v1/proxy/api/data", token: token)
            #expect(challenged.status == 401)
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            #expect(flow["kind"] as? String == "otp")
            let flowID = try #require(flow["id"] as? String)
            let url = try #require(flow["url"] as? String)
            let secret = try #require(url.split(separator: "k=").last.map(String.init))
            // The start page (once confirmed) opens the OTP form, with the additional parameters, in the web path.
            let start = try await ConfirmationForm.confirm(port: live.port, target: String(url.dropFirst(live.baseURL.count)))
            #expect(start.onward == live.baseURL + "/web/botp/otp?redirecttooriginalurl=false")

            let wrong = try await live.request("GET", "/callback/otp?flow=\(flowID)&k=\(secret)&passcode=000001")
            #expect(wrong.status == 400)
            #expect(try await live.request("GET", "/v1/flows/\(flowID)", token: token).json?["status"] as? String == "pending")
            let code = live.simulator.otp.currentCode(user: "alice")
            let right = try await live.request(
                "POST", "/callback/otp", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array("flow=\(flowID)&k=\(secret)&passcode=\(code)".utf8))
            #expect(right.status == 303)
            #expect(right.header("Location") == live.baseURL + "/flows/\(flowID)/done")
            #expect(try await live.request("GET", "/v1/flows/\(flowID)", token: token).json?["status"] as? String == "completed")
            let data = try await Self.eventually(live, "/v1/proxy/api/data", token: token)
            #expect(data.status == 200)
            #expect(data.json?["via"] as? String == "basic-otp")
        }
    }

    @Test func twoBrowsersInTwoFlowsOfOneDestinationStayApart() async throws {
        var options = LiveOptions()
        options.fixedPorts = true
        try await withLiveParley(destinations: Self.destinations, options: options) { live in
            Self.registerACS(live)
            let (_, first) = try await live.register("spapi", credentials: false)
            let (_, second) = try await live.register("spapi", credentials: false)
            let flow1 = try #require(try await live.request("GET", "/v1/proxy/api/data", token: first).json?["flow"] as? [String: Any])
            let flow2 = try #require(try await live.request("GET", "/v1/proxy/api/data", token: second).json?["flow"] as? [String: Any])
            try await ChromeDriver.withSession { one in
                try await ChromeDriver.withSession { two in
                    try await one.openFlow(try #require(flow1["url"] as? String))
                    try await two.openFlow(try #require(flow2["url"] as? String))
                    _ = try await two.findElement(css: "#username")
                    try await Self.signIn(one)
                    _ = try await one.waitForURL(prefix: live.baseURL + "/flows/\(flow1["id"] as? String ?? "")/done")
                    // The second browser is still at the IdP, its flow pending.
                    #expect(try await two.currentURL().contains("/idp/"))
                }
            }
            #expect(try await Self.eventually(live, "/v1/proxy/api/data", token: first).status == 200)
            let stillOut = try await live.request("GET", "/v1/proxy/api/data", token: second)
            #expect(stillOut.status == 401, "the second registration got the first one's session")
            let status2 = try await live.request("GET", "/v1/flows/\(flow2["id"] as? String ?? "")", token: second)
            #expect(status2.json?["status"] as? String == "pending")
        }
    }
}

/// A browser that did not get where a test expected it, or did not show what it expected,
/// within the time allowed.
struct BrowserNotAsExpected: Error, CustomStringConvertible {
    let description: String
}

extension WebDriverSession {
    /// Waits (bounded, 30 s by default) until the browser is at `prefix`; otherwise fails with
    /// what was expected, where the browser is, and `diagnosis` (what the peers saw), so a
    /// sign-in that loops ends quickly with its reason instead of at the flow's expiry.
    @discardableResult
    func reach(
        _ prefix: String, _ expected: String, within timeout: Duration = .seconds(30),
        diagnosis: () -> String = { "" }
    ) async throws -> String {
        do {
            return try await waitForURL(prefix: prefix, timeout: timeout)
        } catch let error as WebDriverError {
            let detail = diagnosis()
            throw BrowserNotAsExpected(
                description: "expected the browser at \(expected) within \(timeout): \(error)" + (detail.isEmpty ? "" : "; \(detail)"))
        }
    }

    /// `findElement` (bounded by the session's implicit wait); otherwise fails with what was
    /// expected, where the browser is, the start of the page's text, and `diagnosis`.
    @discardableResult
    func find(_ selector: String, _ expected: String, diagnosis: () -> String = { "" }) async throws -> WebElement {
        do {
            return try await findElement(css: selector)
        } catch let error as WebDriverError {
            let detail = diagnosis()
            let url = (try? await currentURL()) ?? "an unknown page"
            let text = (try? await pageSource()).map(Self.visibleText) ?? ""
            throw BrowserNotAsExpected(
                description: "expected \(expected) (\(selector)): \(error); the browser is at \(url), which says \"\(text.prefix(200))\""
                    + (detail.isEmpty ? "" : "; \(detail)"))
        }
    }

    /// The text of an HTML page: tags dropped, white space collapsed.
    private static func visibleText(_ html: String) -> String {
        var text = ""
        var inTag = false
        for character in html {
            if character == "<" {
                inTag = true
            } else if character == ">" {
                inTag = false
                text.append(" ")
            } else if !inTag {
                text.append(character)
            }
        }
        return text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }
}
