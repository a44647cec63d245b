import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// Who signed in through OAuth2, live: the real server object, real PostgreSQL, the simulator's
/// authorization server issuing `id_token`s, headless Chromium. alice's sign-in binds the
/// registration; bob signing in on it fails with `identity_mismatch` and changes nothing.
@Suite(.serialized) struct OAuth2IdentityLiveTests {
    /// The simulator's authorization server as an OpenID Connect provider of destination `as`.
    static func destination(_ url: String) -> DestinationSpec {
        var spec = OAuth2Tests.destination(url, grant: "authorization_code", clientID: "parley-public", secret: nil)
        spec.oauth2?.issuer = url
        spec.oauth2?.jwksUri = url + "/oauth/jwks"
        return spec
    }

    /// Opens the flow URL in `browser`, presses the confirmation page's button where there is
    /// one, signs in at the authorization server, and waits for the done page; its source.
    static func signIn(
        _ browser: WebDriverSession, live: LiveParley, flowURL: String, flowID: String, username: String, password: String
    ) async throws -> String {
        try await browser.navigate(to: flowURL)
        if try await browser.pageSource().contains("data-parley-confirm") {
            try await browser.click(try await browser.findElement(css: "form[data-parley-confirm] button"))
        }
        try await browser.waitForURL(prefix: "http://127.0.0.1:\(live.simulatorPort)/oauth/authorize", timeout: .seconds(20))
        try await browser.sendKeys(username, to: try await browser.findElement(css: "#username"))
        try await browser.sendKeys(password, to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#login"))
        try await browser.waitForURL(prefix: live.baseURL + "/flows/\(flowID)/done", timeout: .seconds(20))
        return try await browser.pageSource()
    }

    /// A new flow of the registration: (id, url).
    static func newFlow(_ live: LiveParley, token: String) async throws -> (String, String) {
        let flow = try await live.json("POST", "/v1/flows", token: token, ["kind": "oauth2"])
        #expect(flow.status == 201, "\(flow.text)")
        return (try #require(flow.json?["id"] as? String), try #require(flow.json?["url"] as? String))
    }

    @Test func aliceBindsTheRegistrationAndBobCannotSignInOnIt() async throws {
        let logs = LogCapture()
        try await withLiveParley(destinations: { [Self.destination($0)] }, options: LiveOptions(logs: logs, fixedPorts: true)) { live in
            let issuer = "http://127.0.0.1:\(live.simulatorPort)"
            let (_, token) = try await live.register("as", credentials: false)

            // alice signs in: the id_token names her, the registration is hers, the token is stored.
            let (aliceFlow, aliceURL) = try await Self.newFlow(live, token: token)
            let alicePage = try await ChromeDriver.withSession { browser in
                try await Self.signIn(browser, live: live, flowURL: aliceURL, flowID: aliceFlow, username: "alice", password: "wonderland")
            }
            #expect(alicePage.contains("data-parley-flow-status=\"completed\""))
            #expect(live.simulator.oauth.idTokensIssued == 1)
            let me = try await live.request("GET", "/v1/registrations/me", token: token)
            let user = try #require(me.json?["user"] as? [String: Any])
            #expect(user["issuer"] as? String == issuer)
            #expect(user["subject"] as? String == "alice")
            #expect(user["verified"] as? Bool == false)
            let data = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(data.status == 200)
            #expect(data.json?["sub"] as? String == "alice")
            let before = try await live.store.query("SELECT access_token_sealed, refresh_token_sealed, updated_at FROM tokens")
            #expect(before.count == 1)
            let sealedBefore = try before.first?.optionalBytes("access_token_sealed")

            // bob, in another browser, on alice's registration: the flow fails, nothing changes.
            let (bobFlow, bobURL) = try await Self.newFlow(live, token: token)
            let bobPage = try await ChromeDriver.withSession { browser in
                try await Self.signIn(browser, live: live, flowURL: bobURL, flowID: bobFlow, username: "bob", password: "builder")
            }
            #expect(bobPage.contains("data-parley-flow-status=\"failed\""))
            #expect(live.simulator.oauth.idTokensIssued == 2)
            let failed = try await live.request("GET", "/v1/flows/\(bobFlow)", token: token)
            #expect(failed.json?["status"] as? String == "failed")
            #expect(failed.json?["error"] as? String == "identity_mismatch")
            let after = try await live.store.query("SELECT access_token_sealed, refresh_token_sealed, updated_at FROM tokens")
            #expect(after.count == 1)
            #expect(try after.first?.optionalBytes("access_token_sealed") == sealedBefore, "alice's token row is as it was")
            #expect(try after.first?.optionalBytes("refresh_token_sealed") == (try before.first?.optionalBytes("refresh_token_sealed")))
            // bob's tokens were revoked at the authorization server, not kept.
            #expect(live.simulator.oauth.revocations(hint: "refresh_token") == 1)
            #expect(live.simulator.oauth.revocations(hint: "access_token") == 1)
            let still = try await live.request("GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(still.json?["sub"] as? String == "alice")
            let meAfter = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect((meAfter.json?["user"] as? [String: Any])?["subject"] as? String == "alice")
            let audit = try await live.store.query("SELECT action, detail::text AS detail FROM audit_events WHERE action = 'flow.identity_mismatch'")
            #expect(audit.count == 1)
            #expect(try !(audit.first?.string("detail").contains("bob") ?? true), "issuers only")

            // No token of either sign-in, nor an id_token, in the log.
            let logText = logs.all.joined(separator: "\n")
            #expect(!logText.isEmpty)
            for secret in live.simulator.oauth.issuedTokenValues { #expect(!logText.contains(secret), "a token was logged") }
        }
    }
}
