import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// `reconnect_required`, live: the real server object, real PostgreSQL, the simulator's
/// authorization server, headless Chromium. When the authorization server rejects the refresh
/// token of a signed-in registration, the registration says so (`reconnect_required`, with the
/// flow that fixes it); a long-poll of its status wakes when a person signs in again, and it is
/// `active` by itself.
@Suite(.serialized) struct ReconnectLiveTests {
    @Test func aRejectedRefreshAsksForAPersonAndASignInRecovers() async throws {
        try await withLiveParley(destinations: { [OAuth2IdentityLiveTests.destination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (registration, token) = try await live.register("as", credentials: false)
            let (first, firstURL) = try await OAuth2IdentityLiveTests.newFlow(live, token: token)
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(
                    browser, live: live, flowURL: firstURL, flowID: first, username: "alice", password: "wonderland")
            }
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token).status == 200)
            // Nothing changes: a long-poll answers after its wait, as it was.
            let quiet = try await live.request("GET", "/v1/registrations/me?wait=1", token: token)
            #expect(quiet.status == 200 && quiet.json?["status"] as? String == "active")

            // The server forgets the session: the refresh is rejected, only a person can help.
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/revoke-refresh-tokens")
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/oauth/expire-access-tokens")
            let refused = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token)
            #expect(refused.status == 401 && refused.json?["code"] as? String == "interaction_required", "\(refused.text)")
            let flowID = try #require((refused.json?["flow"] as? [String: Any])?["id"] as? String)
            let flowURL = try #require((refused.json?["flow"] as? [String: Any])?["url"] as? String)
            let me = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(me.json?["status"] as? String == "reconnect_required", "\(me.text)")
            #expect((me.json?["flow"] as? [String: Any])?["id"] as? String == flowID, "its flow is the one the call was answered with")

            // A long-poll waits for the person; the sign-in makes the registration active by itself.
            let poll = Task { try await live.request("GET", "/v1/registrations/me?wait=30", token: token) }
            try await ChromeDriver.withSession { browser in
                _ = try await OAuth2IdentityLiveTests.signIn(
                    browser, live: live, flowURL: flowURL, flowID: flowID, username: "alice", password: "wonderland")
            }
            let woken = try await poll.value
            #expect(woken.status == 200 && woken.json?["status"] as? String == "active", "\(woken.text)")
            #expect(woken.json?["flow"] is NSNull)
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token).status == 200)

            let id = try #require(UUID(uuidString: registration))
            let actions = try await live.store.query(
                "SELECT action FROM audit_events WHERE registration_id = \(id) AND action LIKE 'registration.%' ORDER BY id"
            ).map { try $0.string("action") }
            #expect(actions.filter { $0 == "registration.reconnect_required" || $0 == "registration.recovered" }
                == ["registration.reconnect_required", "registration.recovered"], "\(actions)")
        }
    }
}
