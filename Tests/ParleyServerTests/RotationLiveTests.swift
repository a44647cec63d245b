import AuthFlows
import Foundation
import ParleyTesting
import Store
import Testing

import ParleyDomain
@testable import ParleyServer

/// Refresh-token rotation never forks a family, live: three instances of the real server object
/// on one real PostgreSQL, in front of django-oauth-toolkit (PyPI, `Tests/Fixtures/lifecycle/dot_as.py`)
/// set up as a deployment that guards against replay: every refresh rotates the refresh token,
/// there is no grace period, and a refresh token used twice revokes its whole family, the newest
/// tokens included. Twelve callers on three instances keep one registration busy while its access
/// token goes stale every few seconds; if any instance ever refreshed with a rotated-away token,
/// the family would die and Parley would have to fall back to the password grant.
@Suite(.serialized) struct RotationLiveTests {
    static func stats(_ port: Int) async throws -> [String: Int] {
        let answer = try await RawHTTP.request(port: port, method: "GET", target: "/stats")
        return (try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Int]) ?? [:]
    }

    /// DOT with one confidential client (`parley`/`s3cret`) and alice, once its dependencies are there.
    static func startDOT(port: Int, accessSeconds: Int) async throws -> ParleyProcess {
        try ExternalCheck.run("/bin/bash", [packageRoot + "/scripts/peer-python.sh", "dot-as", "-c", "import oauth2_provider"])
        return try await ParleyProcess.start(
            arguments: [
                packageRoot + "/scripts/peer-python.sh", "dot-as", packageRoot + "/Tests/Fixtures/lifecycle/dot_as.py", "--port", String(port),
                "--client-id", "parley", "--client-secret", "s3cret", "--user", "alice:wonderland", "--access-seconds", String(accessSeconds),
            ], environment: ["HOME": NSTemporaryDirectory()], port: port, binary: "/bin/bash", readyLine: "dot-as ready")
    }

    /// Destination `dot`: the password grant at DOT on `base`.
    static func destination(_ base: String, revocation: Bool) -> DestinationSpec {
        var spec = DestinationSpec(name: "dot", url: base)
        spec.oauth2 = DestinationSpec.OAuth2(
            grant: "password", authorizationEndpoint: nil, tokenEndpoint: base + "/o/token/",
            revocationEndpoint: revocation ? base + "/o/revoke_token/" : nil, clientId: "parley", clientSecret: "s3cret",
            clientAuthentication: "client_secret_basic", scopes: ["read"], scopeKeys: nil, challenge: nil)
        return spec
    }

    @Test func busyInstancesNeverReplayARotatedRefreshToken() async throws {
        let port = try FreePort.find()
        // 33 s tokens: Parley takes a token as stale 30 s before it expires, so each is fresh for 3 s.
        let dot = try await Self.startDOT(port: port, accessSeconds: 33)
        defer { Task { await dot.stop() } }
        let base = "http://127.0.0.1:\(port)"
        try await withLiveParley(
            destinations: { _ in [Self.destination(base, revocation: true)] }, options: LiveOptions(instances: 3)
        ) { live in
            let (_, token) = try await live.register("dot")
            let first = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
            #expect(first.status == 200 && first.json?["sub"] as? String == "alice", "\(first.text) — DOT: \(dot.log.suffix(2000))")
            let original = try #require(try await live.store.query("SELECT access_token_sealed, refresh_token_sealed FROM tokens").first)
            let originalAccess = try original.bytes("access_token_sealed")
            let originalRefresh = try original.bytes("refresh_token_sealed")

            // Twelve callers, four on each instance, for 20 s.
            let instances = [live] + live.others
            let clock = ContinuousClock()
            let end = clock.now.advanced(by: .seconds(20))
            let counts = try await withThrowingTaskGroup(of: [Int: Int].self) { group in
                for caller in 0..<12 {
                    let instance = instances[caller % instances.count]
                    group.addTask {
                        var statuses: [Int: Int] = [:]
                        while clock.now < end {
                            statuses[try await instance.request("GET", "/v1/proxy/api/whoami", token: token).status, default: 0] += 1
                        }
                        return statuses
                    }
                }
                var all: [Int: Int] = [:]
                for try await statuses in group { all.merge(statuses, uniquingKeysWith: +) }
                return all
            }
            #expect(counts.keys.sorted() == [200], "every call answered as alice: \(counts)")
            let during = try await Self.stats(port)
            #expect((during["refreshGrants"] ?? 0) >= 3, "the token was refreshed (rotated) several times: \(during)")
            #expect(during["reuseDetected"] == 0, "no rotated-away refresh token was ever presented: \(during)")
            #expect(during["passwordGrants"] == 1, "the family never died, so the password was used once: \(during)")
            let rejected = try await live.store.query("SELECT count(*) AS n FROM audit_events WHERE action = 'token.refresh_rejected'")
            #expect(try rejected.first?.int("n") == 0)

            // The control: the probes above do see a replay. Put the first tokens back (as a lost
            // rotation write would leave them) and tell every instance to forget its cached copy.
            try await live.store.execute(
                """
                UPDATE tokens SET access_token_sealed = \(originalAccess), refresh_token_sealed = \(originalRefresh),
                    expires_at = now() - interval '1 minute'
                """)
            try await live.store.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(token: nil)))")
            var replayed = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
            var after = try await Self.stats(port)
            let deadline = clock.now.advanced(by: .seconds(10))
            while after["reuseDetected"] == 0, clock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
                replayed = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
                after = try await Self.stats(port)
            }
            #expect(after["reuseDetected"] == 1, "DOT saw the retired refresh token: \(after)")
            #expect(after["passwordGrants"] == 2, "the family died and Parley had to use the password again: \(after)")
            #expect(replayed.status == 200, "\(replayed.text)")
            let rejectedNow = try await live.store.query("SELECT count(*) AS n FROM audit_events WHERE action = 'token.refresh_rejected'")
            #expect(try rejectedNow.first?.int("n") == 1)
        }
        await dot.stop()
    }

    /// A refresh whose answer is lost after DOT carried it out (a gateway's `504` for a slow
    /// server, or a `200` whose body breaks off): DOT has rotated the refresh token, so sending it
    /// again would be a replay that kills the family. Parley takes it as spent: the call that
    /// waited gets a token from the password grant at once, and no refresh token is ever presented
    /// twice, then or later.
    @Test(arguments: ["504", "cut"]) func aLostRefreshAnswerSpendsItsRefreshToken(_ how: String) async throws {
        let port = try FreePort.find()
        let dot = try await Self.startDOT(port: port, accessSeconds: 3600)
        defer { Task { await dot.stop() } }
        let base = "http://127.0.0.1:\(port)"
        try await withLiveParley(
            destinations: { _ in [Self.destination(base, revocation: false)] }
        ) { live in
            let (_, token) = try await live.register("dot")
            let first = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
            #expect(first.status == 200, "\(first.text) — DOT: \(dot.log.suffix(2000))")

            // The token goes stale; the next call refreshes it, and DOT's answer is lost on the way.
            func expire() async throws {
                try await live.store.execute("UPDATE tokens SET expires_at = now() - interval '1 minute'")
                try await live.store.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(token: nil)))")
            }
            let lose = try await RawHTTP.request(port: port, method: "POST", target: "/gateway/lose-refresh-answers?count=1&how=\(how)")
            #expect(lose.status == 204)
            try await expire()
            // Until the notice reaches the instance a call may still send the cached token (DOT
            // still takes it): call until one has refreshed.
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .seconds(10))
            var waited = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
            var stats = try await Self.stats(port)
            while stats["refreshGrants"] == 0, clock.now < deadline {
                waited = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
                stats = try await Self.stats(port)
            }
            #expect(stats["answersLost"] == 1 && stats["refreshGrants"] == 1, "\(stats)")
            #expect(waited.status == 200 && waited.json?["sub"] as? String == "alice", "the call that waited did not fail: \(waited.text)")
            #expect(stats["passwordGrants"] == 2, "the lost refresh was followed by the password grant, a new family: \(stats)")
            let dropped = try await live.store.query("SELECT count(*) AS n FROM audit_events WHERE action = 'token.refresh_failed'")
            #expect(try dropped.first?.int("n") == 1)

            // The new family refreshes as usual, and the spent refresh token never comes back.
            try await expire()
            let end = clock.now.advanced(by: .seconds(10))
            var later = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
            stats = try await Self.stats(port)
            while stats["refreshGrants"] == 1, clock.now < end {
                later = try await live.request("GET", "/v1/proxy/api/whoami", token: token)
                stats = try await Self.stats(port)
            }
            #expect(later.status == 200, "\(later.text)")
            #expect(stats["refreshGrants"] == 2 && stats["passwordGrants"] == 2, "\(stats)")
            #expect(stats["reuseDetected"] == 0, "no refresh token was presented twice: \(stats) — DOT: \(dot.log.suffix(2000))")
        }
        await dot.stop()
    }
}
