import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Step-up, live: the real server object, real PostgreSQL, the simulator's authorization server
/// (which keeps a browser session, so only `prompt=login` makes it ask again), headless
/// Chromium. A destination's rule covers payments; once the registration's sign-in is older
/// than the rule allows, a covered call answers `401 interaction_required` with a `step_up`
/// flow that forces a fresh sign-in, and passes after it. Calls the rule does not cover pass.
@Suite(.serialized) struct StepUpLiveTests {
    static func destination(_ url: String) -> DestinationSpec {
        var spec = OAuth2IdentityLiveTests.destination(url)
        spec.stepUp = [.init(methods: ["POST", "DELETE"], pathPrefix: "/oauth-api/payments", maxAgeSeconds: 300)]
        return spec
    }

    /// Opens a flow URL, confirms where the page asks, and returns the authorization request's URL
    /// once the browser is at the authorization server's login form.
    static func openToLogin(_ browser: WebDriverSession, live: LiveParley, flowURL: String) async throws -> String {
        try await browser.navigate(to: flowURL)
        if try await browser.pageSource().contains("data-parley-confirm") {
            try await browser.click(try await browser.findElement(css: "form[data-parley-confirm] button"))
        }
        try await browser.waitForURL(prefix: "http://127.0.0.1:\(live.simulatorPort)/oauth/authorize", timeout: .seconds(20))
        return try await browser.currentURL()
    }

    static func login(_ browser: WebDriverSession, live: LiveParley, flowID: String, username: String, password: String) async throws -> String {
        try await browser.sendKeys(username, to: try await browser.findElement(css: "#username"))
        try await browser.sendKeys(password, to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#login"))
        try await browser.waitForURL(prefix: live.baseURL + "/flows/\(flowID)/done", timeout: .seconds(20))
        return try await browser.pageSource()
    }

    /// Makes the registration's last sign-in an hour old.
    static func age(_ live: LiveParley, _ registration: String) async throws {
        let id = try #require(UUID(uuidString: registration))
        let changed = try await live.store.execute("UPDATE registrations SET signed_in_at = now() - interval '1 hour' WHERE id = \(id)")
        #expect(changed == 1)
    }

    @Test func aCoveredCallNeedsAFreshSignInAndPassesAfterIt() async throws {
        try await withLiveParley(destinations: { [Self.destination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (registration, token) = try await live.register("as", credentials: false)
            // Never signed in: even a covered call asks for the sign-in first.
            let never = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
            #expect(never.status == 401 && never.json?["code"] as? String == "interaction_required", "\(never.text)")

            try await ChromeDriver.withSession { browser in
                // alice signs in (the ordinary flow the first call asked for, then the step-up one).
                let (first, firstURL) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
                _ = try await OAuth2IdentityLiveTests.signIn(
                    browser, live: live, flowURL: firstURL, flowID: first, username: "alice", password: "wonderland")
                let fresh = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
                #expect(fresh.status == 200 && fresh.json?["sub"] as? String == "alice", "a fresh sign-in passes: \(fresh.text)")

                // An hour later: what the rule does not cover passes, what it covers asks again.
                try await Self.age(live, registration)
                #expect(try await live.request("GET", "/v1/proxy/oauth-api/payments", token: token).status == 200, "GET is not covered")
                #expect(try await live.request("POST", "/v1/proxy/oauth-api/data", token: token).status == 200, "another path")
                #expect(try await live.request("POST", "/v1/proxy/oauth-api/paymentsx", token: token).status == 200, "a longer name")
                let calls = live.simulator.oauth.resourceCalls["oauth-api", default: 0]
                let stale = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
                #expect(stale.status == 401 && stale.json?["code"] as? String == "interaction_required", "\(stale.text)")
                #expect((stale.json?["detail"] as? String)?.contains("at most 300 s old") == true)
                // Like every 401 Parley answers on /v1, it names the protected-resource metadata.
                #expect(stale.header("WWW-Authenticate")?.contains("resource_metadata=\"\(live.baseURL)/.well-known/oauth-protected-resource\"") == true)
                let flow = try #require(stale.json?["flow"] as? [String: Any])
                #expect(flow["kind"] as? String == "oauth2")
                let flowID = try #require(flow["id"] as? String)
                let flowURL = try #require(flow["url"] as? String)
                // The same rule by another spelling, and a second try, get the same flow.
                let upper = try await live.request("POST", "/v1/proxy/oauth-api/PAYMENTS/7", token: token)
                #expect(upper.status == 401 && (upper.json?["flow"] as? [String: Any])?["id"] as? String == flowID, "\(upper.text)")
                #expect(live.simulator.oauth.resourceCalls["oauth-api", default: 0] == calls, "a covered call reached the upstream")

                // The step-up flow makes the authorization server ask again despite its session.
                let authorize = try await Self.openToLogin(browser, live: live, flowURL: flowURL)
                #expect(authorize.contains("prompt=login") && authorize.contains("max_age=0"), "\(authorize)")
                let done = try await Self.login(browser, live: live, flowID: flowID, username: "alice", password: "wonderland")
                #expect(done.contains("data-parley-flow-status=\"completed\""))
                let after = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
                #expect(after.status == 200 && after.json?["sub"] as? String == "alice", "\(after.text)")

                // Stale again, and bob answers the step-up: the flow fails, the call still asks.
                try await Self.age(live, registration)
                let again = try await live.request("DELETE", "/v1/proxy/oauth-api/payments/7", token: token)
                let bobFlow = try #require((again.json?["flow"] as? [String: Any])?["id"] as? String)
                let bobURL = try #require((again.json?["flow"] as? [String: Any])?["url"] as? String)
                _ = try await Self.openToLogin(browser, live: live, flowURL: bobURL)
                let bobDone = try await Self.login(browser, live: live, flowID: bobFlow, username: "bob", password: "builder")
                #expect(bobDone.contains("data-parley-flow-status=\"failed\""))
                #expect(try await live.request("DELETE", "/v1/proxy/oauth-api/payments/7", token: token).status == 401)
            }
        }
    }

    /// A rule covers the operation, not one spelling of it: path parameters, SAP ICF's `(…)`
    /// segment suffix, case, and an OData `$batch` of the service all ask for the fresh sign-in, and
    /// none reaches the upstream. A step-up sign-in the authorization server answered from an old
    /// session (it ignored `prompt=login` and `max_age=0`, as some do) fails `stale_sign_in`.
    @Test func everySpellingAsksAndAnOldAuthenticationFailsTheStepUp() async throws {
        let destination: @Sendable (String) -> DestinationSpec = { url in
            var spec = Self.destination(url)
            spec.stepUp?.append(.init(methods: ["POST"], pathPrefix: "/sap/opu/odata/sap/ZPAY_SRV/Payments", maxAgeSeconds: 300))
            return spec
        }
        try await withLiveParley(destinations: { [destination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (registration, token) = try await live.register("as", credentials: false)
            var browser = PlainBrowser()
            let (first, firstURL) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
            let signedIn = try await IdentityTrustLiveTests.signIn(&browser, flowURL: firstURL, username: "alice", password: "wonderland")
            #expect(signedIn.response.text.contains("data-parley-flow-status=\"completed\""), "\(first): \(signedIn.response.text.prefix(300))")
            try await Self.age(live, registration)
            let calls = live.simulator.oauth.resourceCalls["oauth-api", default: 0]
            let upstreamBefore = live.simulator.totalRequests
            for path in [
                "/oauth-api;v=1/payments", "/oauth-api/payments;jsessionid=1", "/OAUTH-API/Payments/7", "/oauth-api(bD1lbg==)/payments",
                "/oauth-api/pay%6Dents", "/sap(bD1lbg==)/opu/odata/sap/ZPAY_SRV/Payments", "/sap/opu/odata/sap/ZPAY_SRV;o=SYS/Payments",
                "/sap/opu/odata/sap/zpay_srv/Payments('1')", "/sap/opu/odata/sap/ZPAY_SRV/$batch",
            ] {
                let answer = try await live.request("POST", "/v1/proxy" + path, token: token)
                #expect(answer.status == 401 && answer.json?["code"] as? String == "interaction_required", "\(path): \(answer.status) \(answer.text)")
            }
            #expect(live.simulator.oauth.resourceCalls["oauth-api", default: 0] == calls, "a covered call reached the upstream")
            #expect(live.simulator.totalRequests == upstreamBefore, "\(live.simulator.requestsByRoute)")
            // What the rules do not cover still passes.
            #expect(try await live.request("POST", "/v1/proxy/oauth-api/paymentsx", token: token).status == 200)

            // The authorization server ignores the request for a fresh login and answers from alice's
            // session of an hour ago: its id_token's auth_time is older than the flow.
            live.simulator.oauth.ignoresFreshLoginRequests = true
            live.simulator.oauth.ageSessions(by: 3600)
            let stale = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
            let staleFlow = try #require(stale.json?["flow"] as? [String: Any])
            let staleID = try #require(staleFlow["id"] as? String)
            let silent = try await IdentityTrustLiveTests.signIn(
                &browser, flowURL: try #require(staleFlow["url"] as? String), username: "alice", password: "wonderland")
            #expect(silent.response.text.contains("data-parley-flow-status=\"failed\""), "\(silent.response.text.prefix(300))")
            let failed = try await live.request("GET", "/v1/flows/\(staleID)", token: token)
            #expect(failed.json?["error"] as? String == "stale_sign_in", "\(failed.text)")
            #expect(try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token).status == 401)

            // A server that honours it asks alice to sign in now: the step-up passes.
            live.simulator.oauth.ignoresFreshLoginRequests = false
            let again = try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token)
            let againFlow = try #require(again.json?["flow"] as? [String: Any])
            let fresh = try await IdentityTrustLiveTests.signIn(
                &browser, flowURL: try #require(againFlow["url"] as? String), username: "alice", password: "wonderland")
            #expect(fresh.response.text.contains("data-parley-flow-status=\"completed\""), "\(fresh.response.text.prefix(300))")
            #expect(try await live.request("POST", "/v1/proxy/oauth-api/payments", token: token).status == 200)
        }
    }
}
