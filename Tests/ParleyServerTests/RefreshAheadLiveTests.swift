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
}
