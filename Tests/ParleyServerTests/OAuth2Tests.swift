import AuthFlows
import Conversation
import Foundation
import ParleyCrypto
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Synchronization
import Testing
import UpstreamSimulator

/// OAuth2 through the real server object, real PostgreSQL and the simulator's
/// authorization server; the authorization-code flow in headless Chromium.
@Suite(.serialized) struct OAuth2Tests {
    static func destination(
        _ url: String, grant: String, clientID: String = "parley-confidential", secret: String? = "s3cret",
        authentication: String = "client_secret_basic", scopeKeys: [DestinationSpec.OAuth2.ScopeKeyRule]? = nil, returnURLs: [String]? = nil
    ) -> DestinationSpec {
        var d = DestinationSpec(name: "as", url: url, allowedReturnUrls: returnURLs)
        d.oauth2 = DestinationSpec.OAuth2(
            grant: grant, authorizationEndpoint: url + "/oauth/authorize", tokenEndpoint: url + "/oauth/token",
            revocationEndpoint: url + "/oauth/revoke", clientId: clientID, clientSecret: secret, clientAuthentication: authentication,
            scopes: ["read"], scopeKeys: scopeKeys, challenge: nil)
        return d
    }

    static func post(_ live: LiveParley, _ target: String) async throws {
        _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: target)
    }

    @Test(arguments: ["client_secret_basic", "client_secret_post"])
    func clientCredentialsTokenBelongsToTheDestination(authentication: String) async throws {
        try await withLiveParley(destinations: { [Self.destination($0, grant: "client_credentials", authentication: authentication)] }) { live in
            let (_, a) = try await live.register("as", credentials: false)
            let (_, b) = try await live.register("as", credentials: false)
            for token in [a, b, a] {
                let response = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
                #expect(response.status == 200, "\(response.text)")
                #expect(response.json?["sub"] as? String == "parley-confidential")
            }
            #expect(live.simulator.oauth.tokenCalls(grant: "client_credentials") == 1)
            let rows = try await live.store.query("SELECT registration_id, kind FROM tokens")
            #expect(rows.count == 1)
            #expect(try rows[0].optionalUUID("registration_id") == nil)
        }
    }

    @Test func passwordGrantExpiryRefreshAndSAPStyleChallenge() async throws {
        try await withLiveParley(destinations: { [Self.destination($0, grant: "password")] }) { live in
            let (_, token) = try await live.register("as")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).json?["sub"] as? String == "alice")
            #expect(live.simulator.oauth.tokenCalls(grant: "password") == 1)
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            // SAP style: 400 + X-SMP-AUTHENTICATION-STATUS: 1000 is a challenge too.
            let refreshed = try await live.request("GET", "/v1/proxy/sap-api/data", token: token)
            #expect(refreshed.status == 200, "\(refreshed.text)")
            #expect(live.simulator.oauth.tokenCalls(grant: "refresh_token") == 1)
            #expect(live.simulator.oauth.tokenCalls(grant: "password") == 1)
            // Rotation: the old refresh token is dead, the stored one works.
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            #expect(live.simulator.oauth.tokenCalls(grant: "refresh_token") == 2)
            #expect(live.simulator.oauth.tokenErrorsByCode["invalid_grant"] == nil)
        }
    }

    @Test func transientFailuresKeepTokensAndBackOff() async throws {
        let clock = TestClock(Date())
        try await withLiveParley(destinations: { [Self.destination($0, grant: "password")] }, options: LiveOptions(clock: clock)) { live in
            let (_, token) = try await live.register("as")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            try await Self.post(live, "/sim/oauth/fail-token?status=503&count=1&retryAfter=7")
            let failed = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(failed.status == 503)
            #expect(failed.json?["code"] as? String == "upstream_unavailable")
            #expect(Int(failed.header("Retry-After") ?? "") ?? 0 >= 7)
            let calls = live.simulator.oauth.tokenCalls
            // Backing off: no new call to the token endpoint, every stored token kept.
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 503)
            #expect(live.simulator.oauth.tokenCalls == calls)
            let kept = try await live.store.query("SELECT refresh_token_sealed FROM tokens")
            #expect(kept.count == 1)
            #expect(try kept.first?.optionalBytes("refresh_token_sealed") != nil)
            clock.advance(by: .seconds(8))
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            #expect(live.simulator.oauth.tokenCalls(grant: "refresh_token") == 2)
        }
    }

    @Test(arguments: [1, 2])
    func concurrentRequestsWithOneExpiredTokenRefreshOnce(instances: Int) async throws {
        try await withLiveParley(destinations: { [Self.destination($0, grant: "password")] }, options: LiveOptions(instances: instances)) { live in
            let (_, token) = try await live.register("as")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            try await Self.post(live, "/sim/oauth/token-delay?ms=300")
            let ports = [live.port] + live.others.map(\.port)
            let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        let r = try await RawHTTP.request(
                            port: ports[i % ports.count], method: "GET", target: "/v1/proxy/oauth-api/data",
                            headers: [("Authorization", "Bearer \(token)")])
                        return r.status == 200 ? "200" : "\(r.status) \(r.json?["code"] as? String ?? "") \(r.json?["detail"] as? String ?? "")"
                    }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(outcomes.allSatisfy { $0 == "200" }, "\(Dictionary(grouping: outcomes, by: { $0 }).mapValues(\.count))")
            #expect(live.simulator.oauth.tokenCalls(grant: "refresh_token") == 1)
        }
    }

    /// The whole authorization-code flow: challenge → flow → Chromium → callback → retry.
    @Test func authorizationCodeFlowInChromium() async throws {
        let logs = LogCapture()
        try await withLiveParley(
            destinations: { [Self.destination($0, grant: "authorization_code", clientID: "parley-public", secret: nil, returnURLs: ["https://app.example/done*"])] },
            options: LiveOptions(logs: logs, fixedPorts: true)
        ) { live in
            var responses: [RawHTTPResponse] = []
            let created = try await live.json("POST", "/v1/registrations", ["destination": "as", "returnUrl": "https://app.example/done/1"])
            responses.append(created)
            let token = try #require(created.json?["clientToken"] as? String)

            let challenged = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            responses.append(challenged)
            #expect(challenged.status == 401)
            #expect(challenged.json?["code"] as? String == "interaction_required")
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            let flowURL = try #require(challenged.header("Parley-Flow"))
            #expect(flow["url"] as? String == flowURL)
            #expect(flow["status"] as? String == "pending")
            #expect(flow["error"] is NSNull)
            let flowID = try #require(flow["id"] as? String)
            #expect(flowURL.hasPrefix(live.baseURL + "/flows/\(flowID)?k="))

            async let waited = live.request("GET", "/v1/flows/\(flowID)?wait=30", token: token)

            let start = try await ConfirmationForm.confirm(port: live.port, target: String(flowURL.dropFirst(live.baseURL.count)))
            responses.append(start)
            #expect(start.status == 200)
            #expect(start.header("Cache-Control") == "no-store")
            #expect(start.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
            #expect(start.onward?.contains("code_challenge_method=S256") == true)
            #expect(start.onward?.hasSuffix("&prompt=login") == true, "a registration without a verified user asks for a fresh sign-in")

            try await ChromeDriver.withSession { browser in
                try await browser.openFlow(flowURL)
                let user = try await browser.findElement(css: "#username")
                try await browser.sendKeys("alice", to: user)
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "#login"))
                let landed = try await browser.waitForURL(prefix: "https://app.example/done/1", timeout: .seconds(20))
                #expect(landed.contains("flow=\(flowID)"))
                #expect(landed.contains("status=completed"))

                // The authorization server keeps a session for this browser now, but another
                // registration without a verified user asks it for a fresh sign-in (prompt=login):
                // its login page, not a code sent back behind the person's back.
                let (_, second) = try await live.register("as", credentials: false)
                let secondFlow = try #require(try await live.json("POST", "/v1/flows", token: second, [:]).json?["url"] as? String)
                try await browser.openFlow(secondFlow)
                _ = try await browser.findElement(css: "#username")
                #expect(try await browser.currentURL().contains("prompt=login"))
            }
            let done = try await live.request("GET", "/flows/\(flowID)/done")
            #expect(done.status == 303)

            let status = try await waited
            responses.append(status)
            #expect(status.json?["status"] as? String == "completed")
            let retried = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            responses.append(retried)
            #expect(retried.status == 200)
            #expect(retried.json?["sub"] as? String == "alice")
            #expect(live.simulator.oauth.tokenCalls(grant: "authorization_code") == 1)

            // Expiry → refresh; a dead refresh token → a new flow (and the row is gone).
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            responses.append(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token))
            #expect(responses.last?.status == 200)
            #expect(live.simulator.oauth.tokenCalls(grant: "refresh_token") == 1)
            try await Self.post(live, "/sim/oauth/revoke-refresh-tokens")
            try await Self.post(live, "/sim/oauth/expire-access-tokens")
            let again = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            responses.append(again)
            #expect(again.status == 401)
            #expect(again.json?["code"] as? String == "interaction_required")
            #expect(try await live.stateCounts()["tokens"] == 0)

            // Deregistration revokes what is left at the authorization server (nothing here) and wipes everything.
            #expect(try await live.request("DELETE", "/v1/registrations/me", token: token).status == 204)

            // No token value in any response, log line, or database column.
            let secrets = live.simulator.oauth.issuedTokenValues
            #expect(!secrets.isEmpty)
            let responseText = responses.map { r in r.text + r.headers.map { "\($0.name): \($0.value)" }.joined() }.joined()
            let logText = logs.all.joined(separator: "\n")
            var databaseText = ""
            for table in ["registrations", "tokens", "cookies", "flows", "audit_events"] {
                for row in try await live.store.query(SQL(unsafeSQL: "SELECT row_to_json(t)::text AS j FROM \(table) t")) {
                    databaseText += try row.string("j")
                }
            }
            #expect(!logText.isEmpty)
            for secret in secrets {
                #expect(!responseText.contains(secret), "a token reached a thin client")
                #expect(!logText.contains(secret), "a token was logged")
                #expect(!databaseText.contains(secret), "a token is stored unsealed")
            }
            #expect(!logText.contains(token), "a client token was logged")
        }
    }

    /// Completes a flow by hand (no browser) through `instance`, returning the callback's answer.
    static func completeWithoutBrowser(_ instance: LiveParley, flowURL: String, baseURL: String) async throws -> (RawHTTPResponse, String) {
        let start = try await ConfirmationForm.confirm(port: instance.port, target: String(flowURL.dropFirst(baseURL.count)))
        let authorize = try #require(start.onward)
        let query = String(authorize[authorize.index(after: authorize.firstIndex(of: "?")!)...])
        let form = query + "&username=alice&password=wonderland"
        let login = try await RawHTTP.request(
            port: instance.simulatorPort, method: "POST", target: "/oauth/authorize",
            headers: [("Content-Type", "application/x-www-form-urlencoded")], body: Array(form.utf8))
        let callback = try #require(login.header("Location"))
        let path = String(callback.dropFirst(instance.baseURL.count))
        return (try await RawHTTP.request(port: instance.port, method: "GET", target: path), path)
    }

    @Test func longPollOnOneInstanceWakesWhenAnotherCompletesTheFlow() async throws {
        try await withLiveParley(
            destinations: { [Self.destination($0, grant: "authorization_code", clientID: "parley-public", secret: nil)] },
            options: LiveOptions(instances: 2, fixedPorts: true)
        ) { live in
            let a = live
            let b = live.others[0]
            let (_, token) = try await a.register("as", credentials: false)
            let flow = try await a.json("POST", "/v1/flows", token: token, [:])
            #expect(flow.status == 201)
            let flowID = try #require(flow.json?["id"] as? String)
            let flowURL = try #require(flow.json?["url"] as? String)
            #expect(flow.json?["kind"] as? String == "oauth2")
            let started = ContinuousClock.now
            async let waited = a.request("GET", "/v1/flows/\(flowID)?wait=30", token: token)
            let (callback, callbackPath) = try await Self.completeWithoutBrowser(b, flowURL: flowURL, baseURL: a.baseURL)
            #expect(callback.status == 303)
            let status = try await waited
            #expect(status.json?["status"] as? String == "completed")
            #expect(ContinuousClock.now - started < .seconds(10), "woken by NOTIFY, not by the 30 s timeout")

            // Replaying the callback (same state, same code) is refused; the code is not exchanged twice.
            let replay = try await b.request("GET", callbackPath)
            #expect(replay.status == 400)
            #expect(replay.text.contains("data-parley-error=\"invalid_request\""))
            #expect(live.simulator.oauth.tokenCalls(grant: "authorization_code") == 1)
        }
    }

    /// Registration with an OAuth-protected SMP: `login_required` with a flow, then
    /// active with an APPCID by itself once the flow completes.
    @Test func smpRegistrationCompletesAfterTheLoginFlow() async throws {
        try await withLiveParley(
            destinations: { url in
                var d = Self.destination(url, grant: "authorization_code", clientID: "parley-public", secret: nil)
                d.smp = .init(appId: "com.example.app")
                return [d]
            },
            options: LiveOptions(fixedPorts: true)
        ) { live in
            let created = try await live.json("POST", "/v1/registrations", ["destination": "as", "deviceType": "iOS"])
            #expect(created.status == 201, "\(created.text)")
            #expect(created.json?["status"] as? String == "login_required")
            #expect(created.json?["appcid"] is NSNull)
            let flow = try #require(created.json?["flow"] as? [String: Any])
            let flowURL = try #require(flow["url"] as? String)
            let token = try #require(created.json?["clientToken"] as? String)
            let pending = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect((pending.json?["flow"] as? [String: Any])?["id"] as? String == flow["id"] as? String)

            let (callback, _) = try await Self.completeWithoutBrowser(live, flowURL: flowURL, baseURL: live.baseURL)
            #expect(callback.status == 303)
            let me = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(me.json?["status"] as? String == "active")
            let appcid = try #require(me.json?["appcid"] as? String)
            #expect(live.simulator.smp.registrations[appcid]?.deviceType == "iOS")
            #expect(try await live.request("DELETE", "/v1/registrations/me", token: token).status == 204)
            #expect(live.simulator.smp.deletedAppcids.contains(appcid))
        }
    }

    @Test func flowRejections() async throws {
        let clock = TestClock(Date())
        try await withLiveParley(
            destinations: { [Self.destination($0, grant: "authorization_code", clientID: "parley-public", secret: nil, returnURLs: ["com.example.app://signed-in"])] },
            options: LiveOptions(clock: clock, fixedPorts: true)
        ) { live in
            let (_, token) = try await live.register("as", credentials: false)
            let (_, other) = try await live.register("as", credentials: false)
            let flow = try await live.json("POST", "/v1/flows", token: token, ["kind": "oauth2"])
            let flowID = try #require(flow.json?["id"] as? String)
            let flowURL = try #require(flow.json?["url"] as? String)

            // Tampered state, wrong secret, another registration's flow, unsupported kind, foreign returnUrl.
            let tampered = try await live.request("GET", "/callback/oauth2?state=forged&code=abc")
            #expect(tampered.status == 400)
            #expect(live.simulator.oauth.tokenCalls == 0)
            #expect(try await live.request("GET", "/flows/\(flowID)?k=wrong").status == 404)
            #expect(try await live.request("GET", "/flows/\(flowID)").status == 404)
            #expect(try await live.request("GET", "/v1/flows/\(flowID)", token: other).status == 404)
            #expect(try await live.json("POST", "/v1/flows", token: token, ["kind": "saml2"]).status == 400)
            let foreign = try await live.json("POST", "/v1/registrations", ["destination": "as", "returnUrl": "https://evil.example/"])
            #expect(foreign.status == 400)
            #expect(foreign.json?["code"] as? String == "invalid_request")

            // The start page never sends the browser anywhere but the configured authorization endpoint.
            let start = try await ConfirmationForm.confirm(port: live.port, target: String(flowURL.dropFirst(live.baseURL.count)))
            #expect(start.onward?.hasPrefix("http://127.0.0.1:\(live.simulatorPort)/oauth/authorize?") == true)

            // Expiry.
            clock.advance(by: .seconds(601))
            let expired = try await live.request("GET", "/v1/flows/\(flowID)", token: token)
            #expect(expired.json?["status"] as? String == "expired")
            #expect(try await live.request("GET", String(flowURL.dropFirst(live.baseURL.count))).status == 410)
            let done = try await live.request("GET", "/flows/\(flowID)/done")
            #expect(done.text.contains("data-parley-flow-status=\"expired\""))
        }
    }
}
