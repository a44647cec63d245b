import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Refresh ahead of need, live: the real server object, real PostgreSQL, the simulator's
/// authorization server, headless Chromium for the one sign-in. A signed-in registration's token
/// is refreshed in the background with no call asking for it; when the server stops honouring
/// the refresh token, the registration becomes `reconnect_required` before any call meets it.
@Suite(.serialized) struct RefreshAheadLiveTests {
    @Test func aTokenIsRefreshedBeforeAnyCallNeedsItAndALostOneIsToldAhead() async throws {
        var options = LiveOptions(fixedPorts: true)
        // Tokens live 4 s: past half their life and within the lead after 2 s. Look every second.
        options.simulator.accessTokenLifetime = .seconds(4)
        try await withLiveParley(
            destinations: { [OAuth2IdentityLiveTests.destination($0)] }, options: options,
            adjust: {
                $0.housekeeping.refreshAhead = .seconds(300)
                $0.housekeeping.refreshAheadInterval = .seconds(1)
            }
        ) { live in
            let (_, token) = try await live.register("as", credentials: false)
            let (flow, url) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(browser, live: live, flowURL: url, flowID: flow, username: "alice", password: "wonderland")
            }
            let calls = live.simulator.requests(route: "ANY /oauth-api")
            // The code exchange, then a refresh nobody's call asked for.
            #expect(await live.simulator.waitForRequests(route: "POST /oauth/token", count: 2, timeout: .seconds(30)), "no refresh in 30 s")
            #expect(live.simulator.oauth.tokenCallsByGrant["refresh_token", default: 0] >= 1)
            #expect(live.simulator.requests(route: "ANY /oauth-api") == calls, "a call went upstream")
            let answer = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token)
            #expect(answer.status == 200 && answer.json?["sub"] as? String == "alice", "\(answer.text)")

            // The server forgets the refresh tokens: the next look finds out, and the app hears it.
            let status = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(status.json?["status"] as? String == "active")
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/revoke-refresh-tokens")
            let told = try await live.request("GET", "/v1/registrations/me?wait=30", token: token)
            #expect(told.json?["status"] as? String == "reconnect_required", "\(told.text)")
            #expect((told.json?["flow"] as? [String: Any])?["kind"] as? String == "oauth2")
            let audit = try await live.store.query("SELECT action FROM audit_events WHERE action = 'token.refreshed'")
            #expect(!audit.isEmpty)
        }
    }

    /// A password-grant token is refreshed ahead too, and the metric tells the background refresh
    /// (`when="ahead"`) from one a call waited for. A token of a destination this instance does not
    /// serve (one removed from its file), long expired, does not take the look's place: each look
    /// may start one refresh here, and the foreign token sorts first.
    @Test func aPasswordGrantTokenIsRefreshedAheadAndCountedAsSuch() async throws {
        var options = LiveOptions()
        // 34 s tokens: fresh for the call right after registering (Parley takes a token as stale 30 s
        // before it expires), past half their life after 17 s, when the background refresh takes them.
        options.simulator.accessTokenLifetime = .seconds(34)
        try await withLiveParley(
            destinations: { [OAuth2Tests.destination($0, grant: "password")] }, options: options,
            adjust: {
                $0.housekeeping.refreshAhead = .seconds(300)
                $0.housekeeping.refreshAheadInterval = .seconds(1)
                $0.housekeeping.refreshAheadPerDestination = 1
            }
        ) { live in
            let (_, token) = try await live.register("as")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token).status == 200)
            try await live.store.execute(
                """
                INSERT INTO tokens (id, registration_id, destination, kind, scope_key, access_token_sealed, refresh_token_sealed,
                    token_type, scopes, expires_at, updated_at)
                SELECT gen_random_uuid(), registration_id, 'gone', kind, scope_key, access_token_sealed, refresh_token_sealed,
                    token_type, scopes, now() - interval '1 hour', now() - interval '2 hours' FROM tokens
                """)
            let calls = live.simulator.requests(route: "ANY /oauth-api")
            #expect(live.simulator.oauth.tokenCallsByGrant["refresh_token", default: 0] == 0)
            // The background refresh ends (17 s on): the metric counts it as done ahead.
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .seconds(40))
            var metrics = ""
            var ahead: Substring?
            while ahead == nil, clock.now < deadline {
                try await Task.sleep(for: .milliseconds(250))
                metrics = try await live.request("GET", "/metrics").text
                ahead = metrics.split(separator: "\n").first {
                    $0.hasPrefix("parley_token_refreshes_total") && $0.contains("when=\"ahead\"") && $0.contains("outcome=\"ok\"")
                }
            }
            #expect(ahead != nil, "no refresh ahead in 40 s: \(metrics.split(separator: "\n").filter { $0.contains("refreshes") })")
            #expect(live.simulator.oauth.tokenCallsByGrant["refresh_token", default: 0] >= 1, "\(live.simulator.oauth.tokenCallsByGrant)")
            #expect(live.simulator.oauth.tokenCallsByGrant["password", default: 0] == 1)
            #expect(live.simulator.requests(route: "ANY /oauth-api") == calls, "a call went upstream")
            #expect(!metrics.contains("when=\"request\""), "no call waited for a refresh")
        }
    }
}
