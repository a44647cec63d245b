import AuthFlows
import Conversation
import Foundation
import Synchronization
import ParleyDomain

/// `count` events per `period`, refilled continuously (a token bucket).
public struct RateLimit: Sendable, Equatable, CustomStringConvertible {
    public var count: Int
    public var period: Duration

    public init(count: Int, period: Duration) {
        self.count = count
        self.period = period
    }

    /// `N/S`: N events per S seconds (`30/60`); `off` is nil.
    public static func parse(_ text: String) -> RateLimit?? {
        if text == "off" { return .some(nil) }
        let parts = text.split(separator: "/")
        guard parts.count == 2, let n = Int(parts[0]), let s = Int(parts[1]), (1...1_000_000).contains(n), (1...86_400).contains(s) else {
            return nil
        }
        return .some(RateLimit(count: n, period: .seconds(s)))
    }

    public var description: String { "\(count)/\(period.components.seconds)" }
}

/// The limits of the cluster: each instance keeps its buckets in memory and enforces its part
/// of every limit, shared out among the live instances (`ClusterShare`; docs/decisions.md).
public struct RateLimitSettings: Sendable, Equatable {
    /// `POST /v1/registrations` per client address.
    public var registrations: RateLimit?
    /// Proxied requests per registration.
    public var proxy: RateLimit?
    /// Token-endpoint calls (refresh and grants) per registration and destination, or per
    /// destination for the tokens a destination's registrations share (client credentials).
    public var tokenCalls: RateLimit?
    /// Failed Basic or password checks per registration and per user hint.
    public var failedLogins: RateLimit?
    /// Requests on the hosted upstream's web path (`/web/…`) per client address.
    public var web: RateLimit?
    /// `POST /v1/flows` per registration.
    public var flows: RateLimit?
    /// Failed admin authentications per client address.
    public var failedAdmin: RateLimit?
    /// Parley's own pages and callbacks (`/flows/…`, `/callback/…`, `/backchannel-logout`) per
    /// client address: each costs a database query, and nobody has authenticated yet.
    public var pages: RateLimit?
    /// Client tokens that matched no registration, per client address.
    public var failedClientTokens: RateLimit?
    /// Peers whose `X-Forwarded-For` names the client: addresses and CIDR ranges.
    public var trustedProxies: [IPRange]

    public init(
        registrations: RateLimit? = nil, proxy: RateLimit? = nil, tokenCalls: RateLimit? = nil, failedLogins: RateLimit? = nil,
        web: RateLimit? = nil, flows: RateLimit? = nil, failedAdmin: RateLimit? = nil, pages: RateLimit? = nil,
        failedClientTokens: RateLimit? = nil, trustedProxies: [IPRange] = []
    ) {
        self.pages = pages
        self.failedClientTokens = failedClientTokens
        self.registrations = registrations
        self.proxy = proxy
        self.tokenCalls = tokenCalls
        self.failedLogins = failedLogins
        self.web = web
        self.flows = flows
        self.failedAdmin = failedAdmin
        self.trustedProxies = trustedProxies
    }

    /// What a small deployment can live with.
    public static let defaults = RateLimitSettings(
        registrations: RateLimit(count: 30, period: .seconds(60)), proxy: RateLimit(count: 1000, period: .seconds(10)),
        tokenCalls: RateLimit(count: 120, period: .seconds(60)), failedLogins: RateLimit(count: 10, period: .seconds(900)),
        web: RateLimit(count: 600, period: .seconds(60)), flows: RateLimit(count: 30, period: .seconds(60)),
        failedAdmin: RateLimit(count: 10, period: .seconds(300)), pages: RateLimit(count: 300, period: .seconds(60)),
        failedClientTokens: RateLimit(count: 60, period: .seconds(60)))
}

/// Token buckets by key, in memory, bounded in size. Buckets age out by time: one that
/// has refilled completely is the same as no bucket, and goes first when room is needed.
/// When every bucket is still refilling, the least spent go (their owners are given back
/// the little they spent); a throttled key is forgotten only after every key less
/// throttled than it, so a churn of new keys cannot reset it (docs/decisions.md).
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var at: Date
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
    }

    private let limit: RateLimit?
    private let clock: any WallClock
    private let capacity: Int
    /// The cluster the limit holds for: this instance enforces its part (nil: alone).
    private let share: ClusterShare?
    private let state = Mutex(State())

    init(_ limit: RateLimit?, clock: any WallClock, capacity: Int = 100_000, share: ClusterShare? = nil) {
        self.limit = limit
        self.clock = clock
        self.capacity = max(1, capacity)
        self.share = share
    }

    /// This instance's refill rate: the limit's, shared out among the live instances.
    private var perSecond: Double {
        guard let limit else { return 0 }
        let rate = Double(limit.count) / max(1, Double(limit.period.components.seconds))
        return share?.fraction(of: rate) ?? rate
    }

    /// This instance's burst: its part of the limit's count, never less than one event.
    private var burst: Double {
        guard let limit else { return 0 }
        return max(1, share?.fraction(of: Double(limit.count)) ?? Double(limit.count))
    }

    /// Takes one event for `key`: nil when allowed, else how long until one is.
    func take(_ key: String) -> Duration? { spend(key, cost: 1, onlyCheck: false) }

    /// Whether `key` is at its limit now, without spending (failed logins: refuse before trying).
    func exhausted(_ key: String) -> Duration? { spend(key, cost: 1, onlyCheck: true) }

    /// How many keys are held now.
    var count: Int { state.withLock { $0.buckets.count } }

    private func spend(_ key: String, cost: Double, onlyCheck: Bool) -> Duration? {
        guard limit != nil else { return nil }
        let now = clock.now
        let rate = perSecond
        let full = burst
        return state.withLock { state in
            var bucket = state.buckets[key] ?? Bucket(tokens: full, at: now)
            bucket.tokens = min(full, bucket.tokens + max(0, now.timeIntervalSince(bucket.at)) * rate)
            bucket.at = now
            guard bucket.tokens >= cost else {
                state.buckets[key] = bucket
                return .milliseconds(Int64(((cost - bucket.tokens) / rate * 1000).rounded(.up)))
            }
            if onlyCheck {
                // A full bucket is the same as none: nothing to keep.
                if bucket.tokens >= full { state.buckets[key] = nil } else { state.buckets[key] = bucket }
                return nil
            }
            bucket.tokens -= cost
            if state.buckets[key] == nil && state.buckets.count >= capacity {
                Self.makeRoom(&state.buckets, capacity: capacity, full: full, rate: rate, now: now)
            }
            state.buckets[key] = bucket
            return nil
        }
    }

    /// Frees at least a tenth of the capacity (so the work is amortised over many new keys):
    /// first every bucket refilled by now, then, if that was not enough, the buckets that
    /// would be full soonest (the least spent).
    private static func makeRoom(_ buckets: inout [String: Bucket], capacity: Int, full: Double, rate: Double, now: Date) {
        // When a bucket is full again; earlier means less spent.
        func fullAt(_ bucket: Bucket) -> Date { bucket.at.addingTimeInterval((full - bucket.tokens) / max(rate, .leastNonzeroMagnitude)) }
        buckets = buckets.filter { fullAt($0.value) > now }
        let target = capacity - max(1, capacity / 10)
        guard buckets.count > target else { return }
        let leastSpent = buckets.sorted { fullAt($0.value) < fullAt($1.value) }.prefix(buckets.count - target)
        for (key, _) in leastSpent { buckets[key] = nil }
    }
}

/// The limits in force, applied where the contract names them; refusals are counted.
struct RateLimits: Sendable, TokenCallGate, LoginLimiter {
    let settings: RateLimitSettings
    let registrations: RateLimiter
    let proxy: RateLimiter
    let tokenCalls: RateLimiter
    let failedLogins: RateLimiter
    let web: RateLimiter
    let flows: RateLimiter
    let failedAdmin: RateLimiter
    /// Parley's own browser pages and callbacks (`/flows/…`, `/callback/…`, `/backchannel-logout`) per client address.
    let pages: RateLimiter
    /// Client tokens that matched no registration, per client address (each one cost a lookup).
    let failedClientTokens: RateLimiter
    let metrics: Metrics

    init(settings: RateLimitSettings, clock: any WallClock, metrics: Metrics, capacity: Int = 100_000, share: ClusterShare? = nil) {
        self.settings = settings
        func limiter(_ limit: RateLimit?) -> RateLimiter { RateLimiter(limit, clock: clock, capacity: capacity, share: share) }
        registrations = limiter(settings.registrations)
        proxy = limiter(settings.proxy)
        tokenCalls = limiter(settings.tokenCalls)
        failedLogins = limiter(settings.failedLogins)
        web = limiter(settings.web)
        flows = limiter(settings.flows)
        failedAdmin = limiter(settings.failedAdmin)
        pages = limiter(settings.pages)
        failedClientTokens = limiter(settings.failedClientTokens)
        self.metrics = metrics
    }

    /// The key a client is counted under: the peer, or the last `X-Forwarded-For` hop that is
    /// not a trusted proxy when the peer is one; an IPv6 address by its /64, an IPv4-mapped
    /// one as IPv4 (`IPAddress.bucket`).
    func clientAddress(peer: String?, forwardedFor: String?) -> String {
        guard let peer else { return "unknown" }
        let peerAddress = IPAddress(peer)
        guard let peerAddress, isTrusted(peerAddress), let forwardedFor else { return peerAddress?.bucket ?? String(peer.prefix(64)) }
        var hops = forwardedFor.split(separator: ",", omittingEmptySubsequences: true).suffix(64)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        while let last = hops.last, let address = IPAddress(last), isTrusted(address) { hops.removeLast() }
        guard let client = hops.last else { return peerAddress.bucket }
        return IPAddress(client)?.bucket ?? String(client.prefix(64))
    }

    func isTrusted(_ address: IPAddress) -> Bool { settings.trustedProxies.contains { $0.contains(address) } }

    func check(_ limiter: RateLimiter, _ key: String, kind: String) throws(Problem) {
        guard let wait = limiter.take(key) else { return }
        metrics.increment(.rateLimited, [("limit", kind)])
        throw Problem.rateLimited(retryAfter: wait, detail: "too many \(kind) requests; try again after Retry-After seconds")
    }

    /// One token-endpoint call for the tokens of `key`'s owner: its registration, or the
    /// destination when its registrations share the tokens (client credentials).
    func admit(_ key: TokenKey) -> Duration? {
        guard let wait = tokenCalls.take(Self.tokenCallKey(key)) else { return nil }
        metrics.increment(.rateLimited, [("limit", "token_endpoint")])
        return wait
    }

    static func tokenCallKey(_ key: TokenKey) -> String {
        key.registrationID.map { "r:\($0)|\(key.destination)" } ?? "d:" + key.destination
    }

    /// Refused, without spending, while `key` has failed too often: `what` failed (for the detail),
    /// counted under `label`.
    private func refuseWhileExhausted(_ limiter: RateLimiter, _ key: String, label: String, what: String) throws(RateLimited) {
        guard let wait = limiter.exhausted(key) else { return }
        metrics.increment(.rateLimited, [("limit", label)])
        throw RateLimited(retryAfter: wait, detail: "too many \(what); try again after Retry-After seconds")
    }

    /// Before an admin token is looked at: refused while the client address has failed too often.
    func checkAdminAllowed(client: String) throws(RateLimited) {
        try refuseWhileExhausted(failedAdmin, client, label: "failed_admin", what: "failed admin authentications")
    }

    func recordFailedAdmin(client: String) { _ = failedAdmin.take(client) }

    /// Before a client token is looked up: refused while the client address has shown too many
    /// that matched nothing (each costs a database lookup).
    func checkClientTokenAllowed(client: String) throws(RateLimited) {
        try refuseWhileExhausted(failedClientTokens, client, label: "failed_client_tokens", what: "unknown client tokens")
    }

    func recordFailedClientToken(client: String) { _ = failedClientTokens.take(client) }

    /// Before a Basic or password check: refused while any of the attempt's keys has failed too often.
    func checkLoginAllowed(_ attempt: LoginAttempt) throws(RateLimited) {
        for key in attempt.keys { try refuseWhileExhausted(failedLogins, key, label: "failed_logins", what: "failed sign-ins") }
    }

    func recordFailedLogin(_ attempt: LoginAttempt) {
        for key in attempt.keys { _ = failedLogins.take(key) }
    }
}
