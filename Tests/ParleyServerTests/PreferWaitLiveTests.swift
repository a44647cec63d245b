import AuthFlows
import Foundation
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Store
import Testing
import UpstreamSimulator

/// `Prefer: wait=N`, live: the real server object, real PostgreSQL, the simulator's
/// authorization server, headless Chromium. A call that meets a sign-in is held while a person
/// signs in, then sent again and answered with the upstream's final answer; without a sign-in
/// in time it is the `401 interaction_required` it would have been.
@Suite(.serialized) struct PreferWaitLiveTests {
    @Test func aHeldCallIsAnsweredByTheUpstreamOnceThePersonSignedIn() async throws {
        try await withLiveParley(destinations: { [OAuth2IdentityLiveTests.destination($0)] }, options: LiveOptions(fixedPorts: true)) { live in
            let (_, token) = try await live.register("as", credentials: false)

            // No sign-in within the wait: the 401 it would have been, with the flow to open.
            let started = ContinuousClock.now
            let lapsed = try await live.request("POST", "/v1/proxy/oauth-api/orders", token: token, headers: [("Prefer", "wait=1")], body: Array("{}".utf8))
            #expect(lapsed.status == 401 && lapsed.json?["code"] as? String == "interaction_required", "\(lapsed.text)")
            #expect(lapsed.header("Preference-Applied") == "wait=1")
            #expect(ContinuousClock.now - started >= .seconds(1), "it was held for the wait it asked for")
            let flow = try #require(lapsed.json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let flowURL = try #require(flow["url"] as? String)

            // Held again (the same flow), while alice signs in: the upstream's answer, to the same request.
            let rejectionsBefore = live.simulator.oauth.resourceRejections["oauth-api", default: 0]
            let held = Task {
                try await live.request(
                    "POST", "/v1/proxy/oauth-api/orders", token: token, headers: [("Prefer", "respond-async, wait=\"30\"")],
                    body: Array(#"{"item":"held"}"#.utf8))
            }
            // The held call met the challenge upstream before anybody signed in.
            #expect(await live.simulator.waitForRequests(route: "ANY /oauth-api", count: 2, timeout: .seconds(30)))
            let page = try await ChromeDriver.withSession { browser in
                try await OAuth2IdentityLiveTests.signIn(
                    browser, live: live, flowURL: flowURL, flowID: flowID, username: "alice", password: "wonderland")
            }
            #expect(page.contains("data-parley-flow-status=\"completed\""))
            let answer = try await held.value
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.json?["sub"] as? String == "alice")
            #expect(answer.header("Preference-Applied") == "wait=30")
            #expect(live.simulator.oauth.resourceRejections["oauth-api", default: 0] == rejectionsBefore + 1, "the held call was refused once, then answered")

            // A wait the client does not need changes nothing; a malformed one is no wait.
            let plain = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token, headers: [("Prefer", "wait=5")])
            #expect(plain.status == 200 && plain.header("Preference-Applied") == "wait=5")
            let odd = try await live.request("GET", "/v1/proxy/oauth-api/orders", token: token, headers: [("Prefer", "wait=99999999999999999999")])
            #expect(odd.status == 200 && odd.header("Preference-Applied") == nil)
        }
    }

    @Test func theWaitIsReadAsRFC7240Says() {
        #expect(PreferWait.seconds(in: ["wait=10"]) == 10)
        #expect(PreferWait.seconds(in: ["respond-async, WAIT=\"7\""]) == 7)
        #expect(PreferWait.seconds(in: ["handling=lenient", "wait=3; foo=bar"]) == 3)
        #expect(PreferWait.seconds(in: ["wait=600"]) == 60, "clamped to 60")
        for ignored in ["wait=0", "wait=-1", "wait=1.5", "wait=", "wait", "wait=abc", "wait=\"\"", "return=minimal", "wait=1234567890"] {
            #expect(PreferWait.seconds(in: [ignored]) == nil, "\(ignored)")
        }
    }
}
