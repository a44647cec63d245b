import Foundation
import Synchronization

/// Caps the proxied requests one registration has in flight on this instance (from
/// arrival until its response body is written or dropped), so that one client that
/// opens many slow exchanges cannot hold every upstream connection and spool byte.
final class InFlightLimits: Sendable {
    let perRegistration: Int
    private let counts = Mutex<[UUID: Int]>([:])

    init(perRegistration: Int) {
        self.perRegistration = perRegistration
    }

    /// A ticket for one more request, or `429` when the registration is at its cap.
    func admit(_ registration: UUID) throws(Problem) -> InFlightTicket {
        let admitted = counts.withLock { counts -> Bool in
            let current = counts[registration, default: 0]
            guard current < perRegistration else { return false }
            counts[registration] = current + 1
            return true
        }
        guard admitted else {
            throw Problem.rateLimited(
                retryAfter: .seconds(1),
                detail: "this registration already has \(perRegistration) requests in flight; wait for one to finish")
        }
        return InFlightTicket(limits: self, registration: registration)
    }

    func count(_ registration: UUID) -> Int { counts.withLock { $0[registration, default: 0] } }

    fileprivate func leave(_ registration: UUID) {
        counts.withLock { counts in
            let left = counts[registration, default: 1] - 1
            counts[registration] = left > 0 ? left : nil
        }
    }
}

/// One admitted request. Released once: explicitly, or when the last reference goes
/// (a response body that was never written still gives its slot back).
final class InFlightTicket: Sendable {
    private let limits: InFlightLimits
    private let registration: UUID
    private let done = Atomic<Bool>(false)

    fileprivate init(limits: InFlightLimits, registration: UUID) {
        self.limits = limits
        self.registration = registration
    }

    deinit { release() }

    func release() {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return }
        limits.leave(registration)
    }
}
