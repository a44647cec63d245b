import Foundation
import Synchronization
import ParleyDomain

/// Caps the requests one key has in flight on this instance (from arrival until its
/// response body is written or dropped): proxied requests per registration, so that one
/// client that opens many slow exchanges cannot hold every upstream connection and spool
/// byte; the web path per client address and `POST /v1/flows` per registration likewise.
final class InFlightLimits: Sendable {
    /// The cap the cluster holds a key to; each instance takes its part (`share`).
    let total: Int
    /// Who is at the cap, for the refusal's detail ("this registration").
    let subject: String
    /// Where a refusal is counted: `parley_rate_limited_total{limit=<label>}`.
    private let refusals: (metrics: Metrics, label: String)?
    private let share: ClusterShare?
    private let counts = Mutex<[String: Int]>([:])

    init(perKey: Int, subject: String, countingRefusalsIn metrics: Metrics? = nil, as label: String = "in_flight", share: ClusterShare? = nil) {
        self.total = perKey
        self.subject = subject
        self.share = share
        refusals = metrics.map { ($0, label) }
    }

    convenience init(perRegistration: Int, countingRefusalsIn metrics: Metrics? = nil, share: ClusterShare? = nil) {
        self.init(perKey: perRegistration, subject: "this registration", countingRefusalsIn: metrics, share: share)
    }

    /// This instance's cap per key: its part of the cluster's.
    var perKey: Int { share?.part(of: total) ?? total }

    /// A ticket for one more request, or `429` when `key` (a registration's `idString`, a client
    /// address) is at its cap.
    func admit(key: String) throws(Problem) -> InFlightTicket {
        let cap = perKey
        let admitted = counts.withLock { counts -> Bool in
            let current = counts[key, default: 0]
            guard current < cap else { return false }
            counts[key] = current + 1
            return true
        }
        guard admitted else {
            if let refusals { refusals.metrics.increment(.rateLimited, [("limit", refusals.label)]) }
            throw Problem.rateLimited(
                retryAfter: .seconds(1), detail: "\(subject) already has \(cap) requests in flight here; wait for one to finish")
        }
        return InFlightTicket(limits: self, key: key)
    }

    func count(key: String) -> Int { counts.withLock { $0[key, default: 0] } }

    fileprivate func leave(_ key: String) {
        counts.withLock { counts in
            let left = counts[key, default: 1] - 1
            counts[key] = left > 0 ? left : nil
        }
    }
}

/// One admitted request. Released once: explicitly, or when the last reference goes
/// (a response body that was never written still gives its slot back).
final class InFlightTicket: Sendable {
    private let limits: InFlightLimits
    private let key: String
    private let done = Atomic<Bool>(false)

    fileprivate init(limits: InFlightLimits, key: String) {
        self.limits = limits
        self.key = key
    }

    deinit { release() }

    func release() {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return }
        limits.leave(key)
    }
}
