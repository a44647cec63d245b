import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Testing

/// Hosted sign-in end to end: the real server on a real port, real PostgreSQL, headless
/// Chromium, and real peers (a SimpleSAMLphp identity provider with a pysaml2 service
/// provider; the upstream simulator for Basic). Screenshots of the pages go to docs/screenshots.
@Suite(.serialized) struct HostedFlowLiveTests {
    static let screenshots = packageRoot + "/docs/screenshots"

    static func screenshot(_ browser: WebDriverSession, _ name: String) async throws {
        try FileManager.default.createDirectory(atPath: screenshots, withIntermediateDirectories: true)
        try Data(try await browser.screenshotPNG()).write(to: URL(fileURLWithPath: "\(screenshots)/\(name).png"))
    }

    /// Every stored value, as text, to prove a secret never sits unsealed in a row.
    static func everyRow(_ live: LiveParley) async throws -> String {
        var dump = ""
        for table in ["registrations", "tokens", "cookies", "flows", "audit_events"] {
            for row in try await live.store.query(SQL(unsafeSQL: "SELECT row_to_json(t)::text AS j FROM \(table) t")) {
                dump += try row.string("j") + "\n"
            }
        }
        return dump
    }

    // MARK: a real identity provider

    /// How the pysaml2 SP is started (Tests/Fixtures/saml/README.md, "SP modes"): reading the
    /// forwarded headers itself with `PYSP_SESSION` at `Path=/` (default), or behind Werkzeug's
    /// ProxyFix with the cookie scoped to the forwarded prefix, `Path=/web/{destination}`, as
    /// real SPs behind a proxy do (proxyfix), once also with `Domain=<public host>`.
    struct SPMode: Sendable, CustomTestStringConvertible {
        /// `SAML_FIXTURE_SP_MODE`.
        let mode: String
        /// `SAML_FIXTURE_SP_COOKIE_DOMAIN=1`.
        let cookieDomain: Bool

        static let cases = [
            SPMode(mode: "default", cookieDomain: false),
            SPMode(mode: "proxyfix", cookieDomain: false),
            SPMode(mode: "proxyfix", cookieDomain: true),
        ]

        var testDescription: String { "pysaml2 SP \(mode)" + (cookieDomain ? " + cookie domain" : "") }

        /// `start.sh`'s environment settings, as `env` arguments.
        var environment: [String] { ["SAML_FIXTURE_SP_MODE=\(mode)", "SAML_FIXTURE_SP_COOKIE_DOMAIN=\(cookieDomain ? 1 : 0)"] }
    }

    /// The real SAML2 pair (Tests/Fixtures/saml): started for `body`, stopped after.
    struct SAMLFixture {
        let spPort: Int
        let idpPort: Int
        /// The fixture's working directory, with `sp.log` and `idp.log`.
        let directory: String

        /// How many times the SP signed a browser in (its ACS log lines), for a sign-in that did
        /// not end where expected: more than once in one flow means the browser went round
        /// between the ACS and the finish endpoint, because `PYSP_SESSION` did not come back.
        var diagnosis: String {
            let log = (try? String(contentsOfFile: directory + "/sp.log", encoding: .utf8)) ?? ""
            let signIns = log.components(separatedBy: ": signed-in user ").count - 1
            return "the SP signed the browser in \(signIns) time(s)"
                + (signIns > 1 ? ": a sign-in loop, PYSP_SESSION did not come back to the SP" : "")
        }

        static func with<T>(
            publicURL: String, destination: String, mode: SPMode = SPMode(mode: "default", cookieDomain: false),
            _ body: (SAMLFixture) async throws -> T
        ) async throws -> T {
            let directory = NSTemporaryDirectory() + "parley-saml-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let script = packageRoot + "/Tests/Fixtures/saml/"
            let printed = try run(script + "start.sh", [directory, publicURL, destination], environment: mode.environment)
            let line = printed.split(separator: "\n").last { $0.hasPrefix("IDP_PORT=") }.map(String.init) ?? printed
            defer {
                _ = try? run(script + "stop.sh", [directory])
                try? FileManager.default.removeItem(atPath: directory)
            }
            var values: [String: Int] = [:]
            for pair in line.split(separator: " ") {
                let parts = pair.split(separator: "=")
                if parts.count == 2, let n = Int(parts[1].trimmingCharacters(in: .whitespacesAndNewlines)) { values[String(parts[0])] = n }
            }
            guard let sp = values["SP_PORT"], let idp = values["IDP_PORT"] else {
                throw RawHTTPError(description: "the SAML fixture did not start: \(line)")
            }
            return try await body(SAMLFixture(spPort: sp, idpPort: idp, directory: directory))
        }

        /// Runs a fixture script to its end (its servers stay in the background, writing to
        /// their logs), with `environment` (`NAME=value`) added to this process's own;
        /// its standard output, or an error with what it printed.
        static func run(_ path: String, _ arguments: [String], environment: [String] = []) throws -> String {
            let output = NSTemporaryDirectory() + "parley-fixture-" + UUID().uuidString + ".out"
            defer { try? FileManager.default.removeItem(atPath: output) }
            let status = try Spawn.runAndWait(["/usr/bin/env"] + environment + ["/bin/bash", path] + arguments, output: output)
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            guard status == 0 else { throw RawHTTPError(description: "\(path) failed (\(status)): \(text.suffix(2000))") }
            return text
        }
    }

    @Test(arguments: SPMode.cases)
    func aRealIdentityProviderSignsInThroughTheHostedUpstream(mode: SPMode) async throws {
        let port = try FreePort.find()
        let publicURL = "http://127.0.0.1:\(port)"
        // The pages look the same in every mode: one set of screenshots, from the default one.
        let screenshots = mode.mode == "default"
        try await SAMLFixture.with(publicURL: publicURL, destination: "realsaml", mode: mode) { fixture in
            var options = LiveOptions()
            options.port = port
            try await withLiveParley(
                destinations: { _ in
                    var spec = DestinationSpec(name: "realsaml", url: "http://127.0.0.1:\(fixture.spPort)")
                    spec.saml2 = .init()
                    return [spec]
                }, options: options
            ) { live in
                #expect(live.baseURL == publicURL)
                let (_, token) = try await live.register("realsaml", credentials: false)
                // The SP answers an API call with a redirect carrying SAMLRequest: a saml2 flow.
                let challenged = try await live.request("GET", "/v1/proxy/api/data", token: token)
                #expect(challenged.status == 401)
                #expect(challenged.json?["code"] as? String == "interaction_required")
                let flow = try #require(challenged.json?["flow"] as? [String: Any])
                #expect(flow["kind"] as? String == "saml2")
                let flowID = try #require(flow["id"] as? String)
                let flowURL = try #require(flow["url"] as? String)

                // An ACS URL that is not registered is refused by the IdP: the SP reached directly
                // builds its own address into the AuthnRequest.
                let direct = try await RawHTTP.request(port: fixture.spPort, method: "GET", target: "/SAMLAuthLauncher")
                let sso = try #require(direct.header("Location"))
                let ssoTarget = String(sso.dropFirst("http://127.0.0.1:\(fixture.idpPort)".count))
                #expect(try await RawHTTP.request(port: fixture.idpPort, method: "GET", target: ssoTarget).status == 400)

                try await ChromeDriver.withSession { browser in
                    try await browser.openFlow(flowURL)
                    // Once confirmed, the start page opened the finish endpoint; the SP sent the browser to the IdP.
                    let user = try await browser.findElement(css: "#username")
                    #expect(try await browser.currentURL().hasPrefix("http://127.0.0.1:\(fixture.idpPort)/"))
                    if screenshots { try await Self.screenshot(browser, "saml2-identity-provider") }
                    try await browser.sendKeys("alice", to: user)
                    try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                    try await browser.click(try await browser.findElement(css: "#submit_button"))
                    try await browser.reach(
                        publicURL + "/flows/\(flowID)/done", "the flow's done page after signing in (\(mode.testDescription))",
                        diagnosis: { fixture.diagnosis })
                    #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
                    if screenshots { try await Self.screenshot(browser, "flow-completed") }
                }
                let status = try await live.request("GET", "/v1/flows/\(flowID)", token: token)
                #expect(status.json?["status"] as? String == "completed")
                // The retried call succeeds on the session the browser established.
                let data = try await live.request("GET", "/v1/proxy/api/data", token: token)
                #expect(data.status == 200)
                #expect(data.json?["user"] as? String == "alice")
                #expect(data.json?["via"] as? String == "pysaml2")
                #expect(data.header("Set-Cookie") == nil)
                #expect(!(try await Self.everyRow(live)).contains("PYSP_SESSION="), "the SP's session cookie is stored unsealed")
            }
        }
    }

    // MARK: basic form

    @Test func basicFormInABrowserWrongThenRight() async throws {
        let logs = LogCapture()
        var options = LiveOptions()
        options.logs = logs
        options.fixedPorts = true
        let destination: @Sendable (String) -> [DestinationSpec] = { url in
            var spec = DestinationSpec(name: "sim", url: url, basic: .init(form: true))
            spec.displayName = "Simulated Sales (SMP)"
            return [spec]
        }
        try await withLiveParley(destinations: destination, options: options) { live in
            let device: [String: Any] = ["deviceType": "iPhone", "deviceModel": "iPhone 15 Pro", "userHint": "alice@example.com"]
            let (_, token) = try await live.register("sim", credentials: false, extra: device)
            let challenged = try await live.request("GET", "/v1/proxy/api/data", token: token)
            #expect(challenged.status == 401)
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            #expect(flow["kind"] as? String == "basic")
            let flowID = try #require(flow["id"] as? String)
            let flowURL = try #require(flow["url"] as? String)
            try await ChromeDriver.withSession { browser in
                // The flow URL first says who asked for the sign-in; its button goes on.
                try await browser.navigate(to: flowURL)
                let button = try await browser.findElement(css: "[data-parley-confirm] button")
                let confirmation = try await browser.pageSource()
                for shown in ["Simulated Sales (SMP)", "iPhone", "iPhone 15 Pro", "alice@example.com", "just now"] {
                    #expect(confirmation.contains(shown), "\(shown)")
                }
                #expect(try await browser.currentURL() == flowURL)
                try await Self.screenshot(browser, "flow-confirmation")
                try await browser.click(button)
                _ = try await browser.findElement(css: "#username")
                #expect(try await browser.pageSource().contains("Sign in to Simulated Sales (SMP)"))
                try await Self.screenshot(browser, "basic-form")
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("not-the-password", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "button[type=submit]"))
                _ = try await browser.waitForURL(prefix: live.baseURL + "/flows/\(flowID)/credentials")
                // The form comes back with its alert (the URL may be the same as before the post).
                _ = try await browser.findElement(css: "[role=alert]")
                let page = try await browser.pageSource()
                #expect(page.contains("role=\"alert\""))
                #expect(!page.contains("not-the-password"))
                try await Self.screenshot(browser, "basic-form-error")
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "button[type=submit]"))
                _ = try await browser.waitForURL(prefix: live.baseURL + "/flows/\(flowID)/done")
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
            }
            let data = try await live.request("GET", "/v1/proxy/api/data", token: token)
            #expect(data.status == 200)
            let rows = try await Self.everyRow(live)
            #expect(!rows.contains("wonderland") && !rows.contains("not-the-password"), "credentials sit unsealed in a row")
            #expect(!logs.all.joined(separator: "\n").contains("wonderland"), "credentials were logged")
            #expect(!logs.all.joined(separator: "\n").contains("not-the-password"), "credentials were logged")
        }
    }

    @Test func basicFormLockOutEndsOnTheFailurePage() async throws {
        var options = LiveOptions()
        options.fixedPorts = true
        try await withLiveParley(destinations: { [DestinationSpec(name: "sim", url: $0, basic: .init(form: true))] }, options: options) {
            live in
            let (_, token) = try await live.register("sim", credentials: false)
            let flow = try #require(try await live.request("GET", "/v1/proxy/api/data", token: token).json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let secret = try #require((flow["url"] as? String)?.split(separator: "k=").last.map(String.init))
            for attempt in 1...5 {
                let response = try await live.request(
                    "POST", "/flows/\(flowID)/credentials", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                    body: Array("k=\(secret)&username=alice&password=wrong\(attempt)".utf8))
                #expect(response.status == (attempt < 5 ? 200 : 303))
            }
            let status = try await live.request("GET", "/v1/flows/\(flowID)", token: token)
            #expect(status.json?["status"] as? String == "failed")
            #expect(status.json?["error"] as? String == "too_many_attempts")
            try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: live.baseURL + "/flows/\(flowID)/done")
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"failed\""))
                try await Self.screenshot(browser, "flow-failed")
                // The web path without a binding: an error page, nothing forwarded.
                try await browser.navigate(to: live.baseURL + "/web/sim/api/data")
                #expect(try await browser.pageSource().contains("data-parley-error=\"forbidden\""))
                try await Self.screenshot(browser, "web-path-refused")
            }
        }
    }
}
