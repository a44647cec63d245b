import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Testing
import UpstreamSimulator

/// The hosted upstream on an origin of its own (`PARLEY_WEB_PUBLIC_URL`): Parley on
/// `http://127.0.0.1:P`, the web path on `http://localhost:P` (one instance, two host names).
@Suite(.serialized) struct WebOriginLiveTests {
    /// Live options and the adjustment that give the one instance its web origin.
    static func options() throws -> (LiveOptions, String) {
        var options = LiveOptions()
        let port = try FreePort.find()
        options.port = port
        return (options, "http://localhost:\(port)")
    }

    /// A request with `host` as its `Host` (RawHTTP names 127.0.0.1).
    static func request(
        _ port: Int, _ method: String, _ target: String, host: String, headers: [(String, String)] = [], body: [UInt8] = []
    ) async throws -> RawHTTPResponse {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        return try await RawHTTP.send(port: port, bytes: Array((head + "\r\n").utf8) + body)
    }

    /// `name=value` of the `Set-Cookie` that sets `name`.
    static func cookie(_ response: RawHTTPResponse, _ name: String) -> String? {
        response.headers("Set-Cookie").first { $0.hasPrefix(name + "=") }.map { String($0.split(separator: ";")[0]) }
    }

    /// The path and query of an absolute URL on `base`.
    static func target(_ url: String?, on base: String) -> String? {
        guard let url, url.hasPrefix(base) else { return nil }
        return String(url.dropFirst(base.count))
    }

    @Test func samlSignInThroughTheWebOrigin() async throws {
        var (options, _) = try Self.options()
        let port = try #require(options.port)
        options.fixedPorts = true
        // Here Parley is `localhost` and the web origin `127.0.0.1`, the simulator's IdP's site:
        // over http the binding cookie is `SameSite=Lax` (`None` needs `Secure`, as it has over
        // https), so the IdP's post to the ACS carries it only from the web origin's own site.
        let main = "http://localhost:\(port)"
        let web = "http://127.0.0.1:\(port)"
        try await withLiveParley(
            destinations: SimulatedSAMLTests.destinations, options: options,
            adjust: {
                $0.server.publicURL = main
                $0.server.webPublicURL = web
            }
        ) { live in
            func api(_ method: String, _ target: String, token: String? = nil, body: String = "") async throws -> RawHTTPResponse {
                var headers = [("Content-Type", "application/json")]
                if let token { headers.append(("Authorization", "Bearer \(token)")) }
                return try await Self.request(port, method, target, host: "localhost:\(port)", headers: headers, body: Array(body.utf8))
            }
            // The SP names its ACS from the forwarded headers: only the web origin's is registered.
            live.simulator.saml.registeredACSURLs = [web + "/web/spapi/saml/acs"]
            let registered = try await api("POST", "/v1/registrations", body: "{\"destination\":\"spapi\"}")
            let token = try #require(registered.json?["clientToken"] as? String, "\(registered.status) \(registered.text)")
            let challenged = try await api("GET", "/v1/proxy/api/data", token: token)
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let url = try #require(flow["url"] as? String)
            #expect(url.hasPrefix(main + "/flows/"), "the flow URL is on Parley's origin: \(url)")
            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(url)
                _ = try await browser.findElement(css: "#username")
                let challenges = live.simulator.saml.authnRequestsIssued
                try await SimulatedSAMLTests.signIn(browser)
                try await browser.reach(
                    main + "/flows/\(flowID)/done", "the done page on Parley's origin after signing in through the web origin",
                    diagnosis: { SimulatedSAMLTests.signInDiagnosis(live.simulator, challengesBefore: challenges) })
                #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
            }
            #expect(live.simulator.saml.assertionsAccepted == 1)
            let deadline = ContinuousClock.now + .seconds(3)
            var data = try await api("GET", "/v1/proxy/api/data", token: token)
            while data.status != 200, ContinuousClock.now < deadline { data = try await api("GET", "/v1/proxy/api/data", token: token) }
            #expect(data.status == 200)
        }
    }

    @Test func eachOriginServesOnlyItsOwnPaths() async throws {
        let (options, web) = try Self.options()
        try await withLiveParley(destinations: SimulatedSAMLTests.destinations, options: options, adjust: { $0.server.webPublicURL = web }) { live in
            let webHost = "localhost:\(live.port)"
            let (_, token) = try await live.register("spapi", credentials: false)
            let flow = try #require(try await live.request("GET", "/v1/proxy/api/data", token: token).json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let flowTarget = try #require(Self.target(flow["url"] as? String, on: live.baseURL))

            // Parley's own pages and API are not served on the web origin's host.
            for (method, target) in [
                ("GET", "/v1/registrations/me"), ("GET", "/v1/flows/\(flowID)"), ("GET", flowTarget), ("GET", "/flows/\(flowID)/done"),
                ("POST", "/flows/\(flowID)/confirm"), ("GET", "/callback/otp?flow=\(flowID)&k=x&passcode=1"), ("GET", "/callback/oauth2?state=x"),
                ("GET", "/admin/v1/registrations"), ("GET", "/healthz"), ("GET", "/flows/\(flowID)/bind?n=00"),
            ] {
                let answer = try await Self.request(live.port, method, target, host: webHost, headers: [("Authorization", "Bearer \(token)")])
                #expect(answer.status == 404, "\(method) \(target) on the web origin's host: \(answer.status)")
            }
            // The web path and its hand-over are not served on Parley's own host.
            for target in ["/web/spapi/SAMLAuthLauncher", "/web/spapi", "/web-bind/spapi?flow=\(flowID)"] {
                let answer = try await live.request("GET", target)
                #expect(answer.status == 404, "\(target) on Parley's host: \(answer.status)")
            }
            // Each still serves its own.
            #expect(try await live.request("GET", "/v1/registrations/me", token: token).status == 200)
            #expect(try await Self.request(live.port, "GET", "/web/spapi/x", host: webHost).status == 403, "no binding yet")
        }
    }

    @Test func theHandoverBindsOnlyTheBrowserThatConfirmed() async throws {
        let (options, web) = try Self.options()
        try await withLiveParley(destinations: SimulatedSAMLTests.destinations, options: options, adjust: { $0.server.webPublicURL = web }) { live in
            let webHost = "localhost:\(live.port)"
            let (_, token) = try await live.register("spapi", credentials: false)
            let flow = try #require(try await live.request("GET", "/v1/proxy/api/data", token: token).json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let flowTarget = try #require(Self.target(flow["url"] as? String, on: live.baseURL))

            // Step 1: the confirmed start page leaves a start cookie and goes to the web origin.
            let started = try await ConfirmationForm.confirm(port: live.port, target: flowTarget)
            let step1 = try #require(Self.target(started.onward, on: web), "onward to the web origin: \(started.onward ?? started.text)")
            #expect(step1 == "/web-bind/spapi?flow=\(flowID)")
            #expect(Self.cookie(started, "parley_flow") == nil, "Parley's origin set the binding cookie")
            let startCookie = try #require(Self.cookie(started, "parley_handover"))
            #expect(started.headers("Set-Cookie").contains { $0.hasPrefix("parley_handover=") && $0.contains("HttpOnly") && $0.contains("SameSite=Lax") })

            // Step 2, in the confirming browser and in another one (a victim sent the link).
            func nonce() async throws -> (cookie: String, next: String) {
                let answer = try await Self.request(live.port, "GET", step1, host: webHost)
                #expect(answer.status == 303)
                return (try #require(Self.cookie(answer, "parley_web_nonce")), try #require(Self.target(answer.header("Location"), on: live.baseURL)))
            }
            let mine = try await nonce()
            let theirs = try await nonce()
            #expect(mine.next.hasPrefix("/flows/\(flowID)/bind?n="))

            // Step 3: only the browser with the start cookie gets a ticket.
            let refused = try await live.request("GET", theirs.next)
            #expect(refused.status == 403, "a browser that did not start the flow got a ticket: \(refused.status)")
            #expect(try await live.request("GET", theirs.next, headers: [("Cookie", "parley_handover=00")]).status == 403)
            let ticketed = try await live.request("GET", mine.next, headers: [("Cookie", startCookie)])
            #expect(ticketed.status == 303)
            #expect(ticketed.headers("Set-Cookie").contains { $0.hasPrefix("parley_handover=;") && $0.contains("Max-Age=0") })
            let step4 = try #require(Self.target(ticketed.header("Location"), on: web))
            #expect(step4.hasPrefix("/web-bind/spapi?t="))

            // Step 4: the ticket binds only the browser whose nonce it names.
            for cookie in [nil, theirs.cookie, "parley_web_nonce=x"] {
                let answer = try await Self.request(live.port, "GET", step4, host: webHost, headers: cookie.map { [("Cookie", $0)] } ?? [])
                #expect(answer.status == 403, "a ticket bound another browser (\(cookie ?? "no cookie")): \(answer.status)")
                #expect(Self.cookie(answer, "parley_flow") == nil)
            }
            // Nor on another destination's path.
            let elsewhere = try await Self.request(
                live.port, "GET", step4.replacingOccurrences(of: "/web-bind/spapi", with: "/web-bind/sp"), host: webHost,
                headers: [("Cookie", mine.cookie)])
            #expect(elsewhere.status == 403)
            let bound = try await Self.request(live.port, "GET", step4, host: webHost, headers: [("Cookie", mine.cookie)])
            #expect(bound.status == 303)
            #expect(bound.header("Location") == web + "/web/spapi/SAMLAuthLauncher")
            let binding = try #require(Self.cookie(bound, "parley_flow"))
            #expect(binding.hasPrefix("parley_flow=\(flowID)."))
            #expect(bound.headers("Set-Cookie").contains { $0.hasPrefix("parley_flow=") && $0.contains("Path=/web/spapi/") })

            // The binding works on the web origin only: the SP's page comes through there.
            let page = try await Self.request(live.port, "GET", "/web/spapi/SAMLAuthLauncher", host: webHost, headers: [("Cookie", binding)])
            #expect(page.status == 200 || page.status == 302 || page.status == 303, "the web path with the binding: \(page.status)")
            #expect(try await live.request("GET", "/web/spapi/SAMLAuthLauncher", headers: [("Cookie", binding)]).status == 404)
        }
    }
}
