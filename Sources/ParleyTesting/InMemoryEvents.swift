import AuthFlows
public import Conversation
public import Foundation
import ParleyServer
public import ParleyDomain
import Synchronization

/// The outbox in memory, the twin of `PostgresEvents`: events appended with the change they
/// report (the in-memory registrations, flows and revocations append theirs here when wired to
/// it, as `ParleyDependencies.inMemory` does), fanned out to endpoints, delivered under a lease,
/// listed newest first. Router-tier tests reach the events endpoints through it.
public final class InMemoryEvents: EventRepository {
    private struct Delivery {
        var state: WebhookDeliveryState
        var lockedUntil: Date?
    }

    private struct State {
        var events: [StoredLifecycleEvent] = []
        var fannedOut: Set<UUID> = []
        /// By event id, then endpoint, in the order they were made.
        var deliveries: [UUID: [(endpoint: String, delivery: Delivery)]] = [:]
    }

    private let state = Mutex(State())
    private let clock: any WallClock
    /// Where an event's user is read (the registration as it is when the event is written).
    private let registrations: InMemoryRegistrations?

    public init(clock: any WallClock = SystemClock(), registrations: InMemoryRegistrations? = nil) {
        self.clock = clock
        self.registrations = registrations
    }

    /// Every event, oldest first.
    public var all: [StoredLifecycleEvent] { state.withLock { $0.events } }

    /// An event about `registration` (its user as it is now), written with the change it reports.
    func record(_ event: LifecycleEvent, registration: RegistrationRecord?, destination: String? = nil, registrationID: UUID? = nil) {
        let user = registration?.user.map { EventUser(issuer: $0.issuer, subject: $0.subject, verified: $0.verified) }
        let now = clock.now
        state.withLock { state in
            state.events.append(
                StoredLifecycleEvent(
                    id: UUID(), seq: Int64(state.events.count + 1), type: event.type.rawValue, at: now,
                    registrationID: registration?.id ?? registrationID, destination: destination ?? registration?.destination, user: user,
                    detail: event.detail))
        }
    }

    public func append(_ event: LifecycleEvent, registrationID: UUID?, destination: String?) async throws {
        let registration = registrationID.flatMap { id in registrations?.all.first { $0.id == id } }
        record(event, registration: registration, destination: destination, registrationID: registrationID)
    }

    public func fanOut(limit: Int, endpoints: @Sendable (String, String?) -> [String]) async throws -> Int {
        let now = clock.now
        return state.withLock { state in
            let due = state.events.filter { !state.fannedOut.contains($0.id) }.prefix(limit)
            for event in due {
                state.fannedOut.insert(event.id)
                var list = state.deliveries[event.id] ?? []
                for endpoint in endpoints(event.type, event.destination) where !list.contains(where: { $0.endpoint == endpoint }) {
                    list.append(
                        (
                            endpoint,
                            Delivery(
                                state: WebhookDeliveryState(
                                    endpoint: endpoint, status: .pending, attempts: 0, nextAttemptAt: now, lastAttemptAt: nil, lastStatus: nil,
                                    lastError: nil, deliveredAt: nil), lockedUntil: nil)
                        ))
                }
                state.deliveries[event.id] = list
            }
            return due.count
        }
    }

    public func claimDue(limit: Int, lease: Duration) async throws -> [DueDelivery] {
        let now = clock.now
        let until = now.addingTimeInterval(Double(lease.components.seconds))
        return state.withLock { state in
            var claimed: [DueDelivery] = []
            for event in state.events where claimed.count < limit {
                guard var list = state.deliveries[event.id] else { continue }
                for index in list.indices where claimed.count < limit {
                    let delivery = list[index].delivery
                    guard delivery.state.status == .pending, (delivery.state.nextAttemptAt ?? now) <= now,
                        (delivery.lockedUntil ?? .distantPast) <= now
                    else { continue }
                    list[index].delivery.lockedUntil = until
                    claimed.append(DueDelivery(event: event, endpoint: list[index].endpoint, attempts: delivery.state.attempts))
                }
                state.deliveries[event.id] = list
            }
            return claimed
        }
    }

    public func recordAttempt(eventID: UUID, endpoint: String, delivered: Bool, status: Int?, error: String?, retryAt: Date?) async throws {
        let now = clock.now
        state.withLock { state in
            guard var list = state.deliveries[eventID], let index = list.firstIndex(where: { $0.endpoint == endpoint }) else { return }
            var delivery = list[index].delivery
            delivery.state.attempts += 1
            delivery.state.lastAttemptAt = now
            delivery.state.lastStatus = status
            delivery.state.lastError = delivered ? nil : error
            delivery.state.history = Array((delivery.state.history + [WebhookAttempt(at: now, status: status, error: delivered ? nil : error)]).suffix(20))
            if delivered {
                delivery.state.status = .delivered
                delivery.state.deliveredAt = now
                delivery.state.nextAttemptAt = nil
            } else if let retryAt {
                delivery.state.nextAttemptAt = retryAt
            } else {
                delivery.state.status = .failed
                delivery.state.nextAttemptAt = nil
            }
            delivery.lockedUntil = nil
            list[index].delivery = delivery
            state.deliveries[eventID] = list
        }
    }

    public func list(type: String?, registrationID: UUID?, before: Int64?, limit: Int) async throws -> [StoredLifecycleEvent] {
        state.withLock { state in
            state.events.reversed()
                .filter { event in
                    (type == nil || event.type == type) && (registrationID == nil || event.registrationID == registrationID)
                        && (before.map { event.seq < $0 } ?? true)
                }
                .prefix(limit)
                .map { event in
                    var listed = event
                    listed.deliveries = (state.deliveries[event.id] ?? []).map(\.delivery.state)
                    return listed
                }
        }
    }

    public func redeliver(id: UUID) async throws -> Bool {
        let now = clock.now
        return state.withLock { state in
            guard state.events.contains(where: { $0.id == id }) else { return false }
            // Fanned out again: an endpoint that covers the event now and did not then gets it too.
            state.fannedOut.remove(id)
            if var list = state.deliveries[id] {
                for index in list.indices {
                    list[index].delivery.state.status = .pending
                    list[index].delivery.state.nextAttemptAt = now
                }
                state.deliveries[id] = list
            }
            return true
        }
    }

    public func pendingDeliveries() async throws -> Int {
        state.withLock { $0.deliveries.values.reduce(0) { $0 + $1.filter { $0.delivery.state.status == .pending }.count } }
    }
}
