import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Synchronization
import Testing

/// Limits that cannot be turned against users: buckets that age out by time, clients
/// counted by address (IPv6 by /64) behind trusted proxies given as CIDR ranges, and the
/// in-flight caps of the web path and of `POST /v1/flows`.
@Suite struct LimitsTests {
    // MARK: buckets

    /// A churn of new keys past the capacity does not reset a throttled key: the least spent
    /// buckets go first, and the throttled one is the most spent.
    @Test func keyChurnPastCapacityDoesNotResetAThrottledKey() {
        let clock = TestClock()
        let limiter = RateLimiter(RateLimit(count: 2, period: .seconds(60)), clock: clock, capacity: 10)
        #expect(limiter.take("victim") == nil)
        #expect(limiter.take("victim") == nil)
        #expect(limiter.take("victim") != nil)
        for index in 0..<1000 {
            _ = limiter.take("churn-\(index)")
            #expect(limiter.count <= 10)
        }
        #expect(limiter.take("victim") != nil, "a churn of new keys reset the throttled key")
        // Time, not count, lifts it.
        clock.advance(by: .seconds(30))
        #expect(limiter.take("victim") == nil)
    }

    /// Buckets that time has refilled are the ones dropped first: every key still refilling
    /// (here, spent a moment ago) is kept while the old ones make room.
    @Test func bucketsRefilledByTimeAreDroppedFirst() {
        let clock = TestClock()
        let limiter = RateLimiter(RateLimit(count: 3, period: .seconds(60)), clock: clock, capacity: 10)
        for index in 0..<10 { _ = limiter.take("old-\(index)") }
        clock.advance(by: .seconds(60))
        // Spent to the last token, a minute later.
        for _ in 0..<3 { #expect(limiter.take("recent") == nil) }
        #expect(limiter.count <= 10)
        #expect(limiter.take("recent") != nil)
        // Looking without spending keeps nothing for a key that has spent nothing.
        #expect(limiter.exhausted("never-seen") == nil)
        #expect(limiter.count <= 10)
    }

    // MARK: addresses

    @Test func addressesParseInTheirTextForms() {
        #expect(IPAddress("192.0.2.9")?.description == "192.0.2.9")
        #expect(IPAddress("2001:DB8::1")?.description == "2001:db8::1")
        #expect(IPAddress("[2001:db8::1]")?.description == "2001:db8::1")
        #expect(IPAddress("::")?.description == "::")
        #expect(IPAddress("::1")?.description == "::1")
        #expect(IPAddress("1:2:3:4:5:6:7:8")?.description == "1:2:3:4:5:6:7:8")
        #expect(IPAddress("::ffff:192.0.2.9")?.description == "192.0.2.9")
        #expect(IPAddress("64:ff9b::192.0.2.9")?.description == "64:ff9b::c000:209")
        for bad in [
            "", "192.0.2", "192.0.2.9.1", "192.0.2.256", "192.0.2.09", "192.0.2.+9", "1::2::3", ":::", "1:2:3:4:5:6:7:8:9", "12345::",
            "g::1", "+1::", "fe80::1%eth0", "192.0.2.9:80", "localhost", "1.2.3.4/8", String(repeating: "1", count: 100),
        ] {
            #expect(IPAddress(bad) == nil, "\(bad)")
        }
    }

    @Test func clientsAreCountedByIPv4AddressAndIPv6Slash64() {
        #expect(IPAddress("192.0.2.9")?.bucket == "192.0.2.9")
        #expect(IPAddress("::ffff:192.0.2.9")?.bucket == "192.0.2.9")
        #expect(IPAddress("2001:db8:1:2:aaaa:bbbb:cccc:dddd")?.bucket == "2001:db8:1:2::/64")
        #expect(IPAddress("2001:db8:1:2::1")?.bucket == IPAddress("2001:db8:1:2:ffff::")?.bucket)
        #expect(IPAddress("2001:db8:1:3::1")?.bucket != IPAddress("2001:db8:1:2::1")?.bucket)
        let limits = RateLimits(settings: RateLimitSettings(), clock: TestClock(), metrics: Metrics())
        #expect(limits.clientAddress(peer: "2001:db8:1:2::77", forwardedFor: nil) == "2001:db8:1:2::/64")
        #expect(limits.clientAddress(peer: "::ffff:198.51.100.4", forwardedFor: nil) == "198.51.100.4")
    }

    @Test func rangesParseAndMatch() throws {
        let v4 = try #require(IPRange("10.0.0.0/8"))
        #expect(v4.contains(try #require(IPAddress("10.255.1.2"))))
        #expect(v4.contains(try #require(IPAddress("::ffff:10.1.2.3"))))
        #expect(!v4.contains(try #require(IPAddress("11.0.0.1"))))
        #expect(!v4.contains(try #require(IPAddress("::a00:1"))))
        let v6 = try #require(IPRange("fd00:10::/32"))
        #expect(v6.contains(try #require(IPAddress("fd00:10:ffff::1"))))
        #expect(!v6.contains(try #require(IPAddress("fd00:11::1"))))
        let one = try #require(IPRange("192.0.2.7"))
        #expect(one.contains(try #require(IPAddress("192.0.2.7"))))
        #expect(!one.contains(try #require(IPAddress("192.0.2.8"))))
        let any4 = try #require(IPRange("0.0.0.0/0"))
        #expect(any4.contains(try #require(IPAddress("203.0.113.1"))))
        #expect(IPRange("10.0.0.0/8")?.description == "10.0.0.0/8")
        #expect(IPRange("2001:db8::/48")?.description == "2001:db8::/48")
        #expect(IPRange("192.0.2.7")?.description == "192.0.2.7")
        for bad in ["10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "fd00::/129", "fd00::1/64", "pod network", "*", "10.0.0.0/8/8"] {
            #expect(IPRange(bad) == nil, "\(bad)")
        }
    }

    /// The `X-Forwarded-For` walk with ranges: from the right, every hop a trusted range holds
    /// is skipped; the first other one is the client (counted by its /64 when IPv6).
    @Test func forwardedForWalksTrustedRanges() {
        let limits = RateLimits(
            settings: RateLimitSettings(trustedProxies: ["10.0.0.0/8", "fd00::/8", "192.0.2.1"].compactMap { IPRange($0) }),
            clock: TestClock(), metrics: Metrics())
        #expect(limits.clientAddress(peer: "10.2.3.4", forwardedFor: "198.51.100.1") == "198.51.100.1")
        #expect(limits.clientAddress(peer: "fd12::5", forwardedFor: "203.0.113.7, 2001:db8:5:6::9, 10.9.9.9, fd00::1")
            == "2001:db8:5:6::/64")
        #expect(limits.clientAddress(peer: "::ffff:10.0.0.3", forwardedFor: "198.51.100.1") == "198.51.100.1")
        #expect(limits.clientAddress(peer: "192.0.2.1", forwardedFor: "198.51.100.2, 192.0.2.1") == "198.51.100.2")
        // An untrusted peer's header is ignored; so is a peer outside every range.
        #expect(limits.clientAddress(peer: "192.0.2.2", forwardedFor: "198.51.100.1") == "192.0.2.2")
        #expect(limits.clientAddress(peer: "11.0.0.1", forwardedFor: "198.51.100.1") == "11.0.0.1")
        // Every hop trusted: the peer itself.
        #expect(limits.clientAddress(peer: "10.0.0.1", forwardedFor: "10.0.0.2, 10.0.0.3") == "10.0.0.1")
    }

    static func read(_ settings: [String: String]) throws -> ParleyConfiguration {
        try ConfigurationTests.withDestinations { path in
            try ParleyConfiguration.fromEnvironment(ConfigurationTests.required(path).merging(settings) { $1 })
        }
    }

    static func problems(_ settings: [String: String]) throws -> [String] {
        do {
            _ = try read(settings)
            Issue.record("the configuration was accepted")
            return []
        } catch let error as ParleyConfiguration.Invalid {
            return error.problems
        }
    }

    @Test func trustedProxiesAreReadAsRangesAndABadEntryIsAProblem() throws {
        let configuration = try Self.read(["PARLEY_TRUSTED_PROXIES": "10.0.0.0/8, fd00::/8,192.0.2.1"])
        #expect(configuration.rateLimits.trustedProxies.map(\.description) == ["10.0.0.0/8", "fd00::/8", "192.0.2.1"])
        let problems = try Self.problems(["PARLEY_TRUSTED_PROXIES": "10.0.0.0/8,pod network,10.1.0.1/8"])
        #expect(problems.count == 2, "\(problems)")
        #expect(problems.first?.hasPrefix("PARLEY_TRUSTED_PROXIES: entry 2 is not an IP address or CIDR range") == true, "\(problems)")
        #expect(problems.last?.hasPrefix("PARLEY_TRUSTED_PROXIES: entry 3 ") == true, "\(problems)")
    }

    /// Admin tokens need 32 random bytes' worth (43 characters of base64url); a shorter one is
    /// named by its position, never by its value.
    @Test func shortAdminTokensAreNamedByPositionOnly() throws {
        let good = String(repeating: "a", count: 43)
        let short = "guessable-admin-token-of-42-characters-xyz"
        #expect(short.count == 42)
        let problems = try Self.problems(["PARLEY_ADMIN_TOKENS": "\(good),\(short)"])
        #expect(problems.count == 1, "\(problems)")
        #expect(problems.first?.hasPrefix("PARLEY_ADMIN_TOKENS: token 2 is too short; each needs at least 43 characters") == true, "\(problems)")
        #expect(!problems.joined().contains(short) && !problems.joined().contains(good))
        #expect(try Self.read(["PARLEY_ADMIN_TOKENS": good]).keys.adminTokenHashes.count == 1)
    }

    @Test func theNewLimitsAreRead() throws {
        let configuration = try Self.read([
            "PARLEY_RATE_LIMIT_WEB": "5/1", "PARLEY_RATE_LIMIT_FLOWS": "off", "PARLEY_RATE_LIMIT_FAILED_ADMIN": "3/60",
            "PARLEY_MAX_INFLIGHT_WEB_PER_CLIENT": "7", "PARLEY_MAX_INFLIGHT_FLOWS_PER_REGISTRATION": "2",
        ])
        #expect(configuration.rateLimits.web == RateLimit(count: 5, period: .seconds(1)))
        #expect(configuration.rateLimits.flows == nil)
        #expect(configuration.rateLimits.failedAdmin == RateLimit(count: 3, period: .seconds(60)))
        #expect(configuration.limits.maxInFlightWebPerClient == 7 && configuration.limits.maxInFlightFlowsPerRegistration == 2)
        let defaults = try Self.read([:])
        #expect(defaults.limits.maxInFlightWebPerClient == 64 && defaults.limits.maxInFlightFlowsPerRegistration == 4)
    }

    // MARK: in-flight caps

    /// The web path's in-flight cap (per client address) through its admission middleware: a
    /// second request while the first is still being answered is a `429` page with
    /// `Retry-After`; the slot comes back when the first answer has been written.
    @Test func theWebPathCapsRequestsInFlightPerClient() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
        let calls = Atomic<Int>(0)
        let metrics = Metrics()
        let router = Router(context: ParleyRequestContext.self)
        router.group("/web").add(middleware: HostedUpstreamAdmission(
            limits: RateLimits(settings: RateLimitSettings(), clock: TestClock(), metrics: metrics),
            inFlight: InFlightLimits(perKey: 1, subject: "this address", countingRefusalsIn: metrics, as: "web_in_flight"),
            pages: Pages(destinations: [:], assets: PageAssets(destinations: []), publicURL: "http://127.0.0.1:8080"))
        ).get("{destination}") { _, _ -> Response in
            // Only the first request waits (so that a request let through answers at once).
            if calls.add(1, ordering: .relaxed).oldValue == 0 {
                arrival.yield()
                for await _ in released { break }
            }
            return Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(string: "page")))
        }
        try await Application(router: router).test(.router) { client in
            async let first = client.execute(uri: "/web/a", method: .get)
            for await _ in arrived { break }
            let refused = try await client.execute(uri: "/web/a", method: .get)
            #expect(refused.status == .tooManyRequests)
            #expect(refused.headers[.retryAfter] == "1")
            #expect(refused.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(String(buffer: refused.body).contains("data-parley-error=\"rate_limited\""))
            release.yield()
            #expect(try await first.status == .ok)
            #expect(try await client.execute(uri: "/web/b", method: .get).status == .ok)
        }
    }

    /// `POST /v1/flows`'s in-flight cap (per registration) through its admission middleware.
    @Test func startingFlowsIsCappedInFlightPerRegistration() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
        let calls = Atomic<Int>(0)
        let metrics = Metrics()
        let registration = RegistrationRecord(
            id: UUID(), destination: "d", status: .active, deviceType: nil, deviceModel: nil, userHint: nil, returnUrl: nil,
            credentialsSealed: nil, clientCertificateSealed: nil, createdAt: Date())
        struct AsRegistration: RouterMiddleware {
            let registration: RegistrationRecord
            func handle(
                _ request: Request, context: ParleyRequestContext, next: (Request, ParleyRequestContext) async throws -> Response
            ) async throws -> Response {
                var context = context
                context.registration = registration
                return try await next(request, context)
            }
        }
        let router = Router(context: ParleyRequestContext.self)
        router.group("/v1").add(middleware: AsRegistration(registration: registration)).group(context: ClientRequestContext.self)
            .group("flows").add(middleware: FlowAdmission(
                limits: RateLimits(settings: RateLimitSettings(), clock: TestClock(), metrics: metrics),
                inFlight: InFlightLimits(perKey: 1, subject: "this registration", countingRefusalsIn: metrics, as: "flows_in_flight"))
            ).post { _, _ -> Response in
                if calls.add(1, ordering: .relaxed).oldValue == 0 {
                    arrival.yield()
                    for await _ in released { break }
                }
                return Response(status: .created)
            }
        try await Application(router: router).test(.router) { client in
            async let first = client.execute(uri: "/v1/flows", method: .post)
            for await _ in arrived { break }
            let refused = try await client.execute(uri: "/v1/flows", method: .post)
            #expect(refused.status == .tooManyRequests)
            #expect(RouterTests.json(refused.body)["code"] as? String == "rate_limited")
            #expect(refused.headers[.retryAfter] == "1")
            release.yield()
            #expect(try await first.status == .created)
            #expect(try await client.execute(uri: "/v1/flows", method: .post).status == .created)
        }
    }
}
