import Foundation
import ParleyTesting
import Testing

/// Every instance stops using a revoked credential at once: caches follow `LISTEN/NOTIFY`,
/// not a clock (the safety lifetime of a cached entry is 60 s).
@Suite(.serialized) struct InvalidationLiveTests {
    /// Polls `instance` until a call with `token` is refused; the time that took.
    static func refusal(on instance: LiveParley, token: String, path: String = "/v1/proxy/api/data") async throws -> Duration {
        let started = ContinuousClock.now
        while try await instance.request("GET", path, token: token).status != 401 {
            guard ContinuousClock.now - started < .seconds(5) else { break }
            await Task.yield()
        }
        return ContinuousClock.now - started
    }

    @Test func aDeregistrationOnOneInstanceIsRefusedByTheOtherAtOnce() async throws {
        var options = LiveOptions()
        options.instances = 2
        try await withLiveParley(options: options) { a in
            let b = try #require(a.others.first)
            var delays: [Duration] = []
            for _ in 0..<100 {
                let (_, token) = try await a.register()
                // B caches the client-token lookup and the cookie jar on the proxy path.
                #expect(try await b.request("GET", "/v1/proxy/api/data", token: token).status == 200)
                #expect(try await b.request("GET", "/v1/proxy/api/data", token: token).status == 200)
                #expect(try await a.request("DELETE", "/v1/registrations/me", token: token).status == 204)
                delays.append(try await Self.refusal(on: b, token: token))
            }
            delays.sort()
            let p50 = delays[delays.count / 2]
            let p99 = delays[delays.count * 99 / 100 - 1]
            print("revocation propagation A→B over \(delays.count) deregistrations: p50 \(p50), p99 \(p99), max \(delays[delays.count - 1])")
            #expect(p99 < .seconds(1), "another instance kept using a revoked client token")
        }
    }

    @Test func anAdminRevocationDropsTheCookieJarEverywhere() async throws {
        var options = LiveOptions()
        options.instances = 2
        try await withLiveParley(destinations: { SMPEndToEndTests.smpDestination($0) }, options: options) { a in
            let b = try #require(a.others.first)
            let (id, token) = try await a.register("sim")
            // The session cookie is in the jar; B caches the jar.
            #expect(try await b.request("GET", "/v1/proxy/api/data", token: token).status == 200)
            let sessions = a.simulator.smp.sessionsCreated
            let revoked = try await a.request(
                "POST", "/admin/v1/revocations", headers: [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk"), ("Content-Type", "application/json")],
                body: Array("{\"registrationId\":\"\(id)\"}".utf8))
            #expect(revoked.json?["revoked"] as? Int == 1)
            // B's next call no longer carries the revoked session: the upstream opens a new one.
            let deadline = ContinuousClock.now + .seconds(1)
            while a.simulator.smp.sessionsCreated == sessions && ContinuousClock.now < deadline {
                #expect(try await b.request("GET", "/v1/proxy/api/data", token: token).status == 200)
            }
            #expect(a.simulator.smp.sessionsCreated > sessions, "instance B kept sending a revoked session cookie")
        }
    }

    /// OAuth2 tokens are cached per instance (the proxy path reads one per request); a
    /// revocation on one instance drops every instance's copy.
    @Test func aTokenRevocationOnOneInstanceDropsTheCachedTokenOnTheOther() async throws {
        var options = LiveOptions()
        options.instances = 2
        try await withLiveParley(destinations: { [OAuth2Tests.destination($0, grant: "client_credentials")] }, options: options) { a in
            let b = try #require(a.others.first)
            let (_, token) = try await a.register("as", credentials: false)
            #expect(try await b.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            #expect(try await b.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            #expect(a.simulator.oauth.tokenCalls == 1)  // the second call used B's cached token
            let revoked = try await a.request(
                "POST", "/admin/v1/revocations", headers: [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk"), ("Content-Type", "application/json")],
                body: Array("{\"destination\":\"as\"}".utf8))
            #expect(revoked.json?["revoked"] as? Int == 1)
            // B soon has no token: its next call obtains a new one instead of sending the revoked one.
            let deadline = ContinuousClock.now + .seconds(1)
            while a.simulator.oauth.tokenCalls == 1 && ContinuousClock.now < deadline {
                #expect(try await b.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            }
            #expect(a.simulator.oauth.tokenCalls == 2, "instance B kept a revoked token")
        }
    }
}
