import AuthFlows
import Conversation
import Foundation
import Synchronization

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

/// The limits of one instance (state per instance: behind a balancer, a client meets
/// each instance's own limit; docs/decisions.md says why that is acceptable).
public struct RateLimitSettings: Sendable, Equatable {
    /// `POST /v1/registrations` per client address.
    public var registrations: RateLimit?
    /// Proxied requests per registration.
    public var proxy: RateLimit?
    /// Token-endpoint calls (refresh and grants) per destination.
    public var tokenCalls: RateLimit?
    /// Failed Basic or password checks per registration and per user hint.
    public var failedLogins: RateLimit?
    /// Peers whose `X-Forwarded-For` names the client (exact addresses).
    public var trustedProxies: Set<String>

    public init(
        registrations: RateLimit? = nil, proxy: RateLimit? = nil, tokenCalls: RateLimit? = nil, failedLogins: RateLimit? = nil,
        trustedProxies: Set<String> = []
    ) {
        self.registrations = registrations
        self.proxy = proxy
        self.tokenCalls = tokenCalls
        self.failedLogins = failedLogins
        self.trustedProxies = trustedProxies
    }

    /// What a small deployment can live with.
    public static let defaults = RateLimitSettings(
        registrations: RateLimit(count: 30, period: .seconds(60)), proxy: RateLimit(count: 1000, period: .seconds(10)),
        tokenCalls: RateLimit(count: 120, period: .seconds(60)), failedLogins: RateLimit(count: 10, period: .seconds(900)))
}

/// Token buckets by key, in memory, bounded in size.
final class RateLimiter: Sendable {
    private let limit: RateLimit?
    private let clock: any WallClock
    private let capacity: Int
    private let buckets = Mutex<[String: (tokens: Double, at: Date)]>([:])

    init(_ limit: RateLimit?, clock: any WallClock, capacity: Int = 100_000) {
        self.limit = limit
        self.clock = clock
        self.capacity = capacity
    }

    private var perSecond: Double {
        guard let limit else { return 0 }
        return Double(limit.count) / max(1, Double(limit.period.components.seconds))
    }

    /// Takes one event for `key`: nil when allowed, else how long until one is.
    func take(_ key: String) -> Duration? { spend(key, cost: 1, onlyCheck: false) }

    /// Whether `key` is at its limit now, without spending (failed logins: refuse before trying).
    func exhausted(_ key: String) -> Duration? { spend(key, cost: 1, onlyCheck: true) }

    private func spend(_ key: String, cost: Double, onlyCheck: Bool) -> Duration? {
        guard let limit else { return nil }
        let now = clock.now
        let rate = perSecond
        return buckets.withLock { buckets in
            var bucket = buckets[key] ?? (Double(limit.count), now)
            bucket.tokens = min(Double(limit.count), bucket.tokens + max(0, now.timeIntervalSince(bucket.at)) * rate)
            bucket.at = now
            guard bucket.tokens >= cost else {
                buckets[key] = bucket
                return .milliseconds(Int64(((cost - bucket.tokens) / rate * 1000).rounded(.up)))
            }
            if !onlyCheck { bucket.tokens -= cost }
            if buckets.count >= capacity && buckets[key] == nil {
                buckets = buckets.filter { $0.value.tokens < Double(limit.count) }
                if buckets.count >= capacity { buckets.removeAll(keepingCapacity: true) }
            }
            buckets[key] = bucket
            return nil
        }
    }
}

/// The limits in force, applied where the contract names them; refusals are counted.
struct RateLimits: Sendable, TokenCallGate {
    let settings: RateLimitSettings
    let registrations: RateLimiter
    let proxy: RateLimiter
    let tokenCalls: RateLimiter
    let failedLogins: RateLimiter
    let metrics: Metrics

    init(settings: RateLimitSettings, clock: any WallClock, metrics: Metrics) {
        self.settings = settings
        registrations = RateLimiter(settings.registrations, clock: clock)
        proxy = RateLimiter(settings.proxy, clock: clock)
        tokenCalls = RateLimiter(settings.tokenCalls, clock: clock)
        failedLogins = RateLimiter(settings.failedLogins, clock: clock)
        self.metrics = metrics
    }

    /// The client address: the peer, or the last `X-Forwarded-For` hop a trusted peer names.
    func clientAddress(peer: String?, forwardedFor: String?) -> String {
        guard let peer else { return "unknown" }
        guard settings.trustedProxies.contains(peer), let forwardedFor else { return peer }
        var hops = forwardedFor.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        while let last = hops.last, settings.trustedProxies.contains(last) { hops.removeLast() }
        return hops.last.map { String($0.prefix(64)) } ?? peer
    }

    func check(_ limiter: RateLimiter, _ key: String, kind: String) throws(Problem) {
        guard let wait = limiter.take(key) else { return }
        metrics.increment(.rateLimited, [("limit", kind)])
        throw Problem.rateLimited(retryAfter: wait, detail: "too many \(kind) requests; try again after Retry-After seconds")
    }

    func admit(destination: String) -> Duration? {
        guard let wait = tokenCalls.take(destination) else { return nil }
        metrics.increment(.rateLimited, [("limit", "token_endpoint")])
        return wait
    }

    /// Before a Basic or password check: refused while any of the attempt's keys has failed too often.
    func checkLoginAllowed(_ attempt: LoginAttempt) throws(Problem) {
        for key in attempt.keys {
            if let wait = failedLogins.exhausted(key) {
                metrics.increment(.rateLimited, [("limit", "failed_logins")])
                throw Problem.rateLimited(retryAfter: wait, detail: "too many failed sign-ins; try again after Retry-After seconds")
            }
        }
    }

    func recordFailedLogin(_ attempt: LoginAttempt) {
        for key in attempt.keys { _ = failedLogins.take(key) }
    }
}

/// What a failed sign-in is counted against: the registration that tried, and, where known,
/// what was really tried (the upstream username, or the verified user) from which client
/// address. Never the `userHint` a client chose: a victim's registrations cannot be locked out
/// by somebody else's failures under their name.
struct LoginAttempt: Sendable, Equatable {
    let registration: UUID
    var tried: String?
    var client: String?

    var keys: [String] {
        var keys = ["r:" + registration.uuidString]
        if let tried, let client { keys.append("u:" + tried.lowercased() + "|" + client) }
        return keys
    }
}
