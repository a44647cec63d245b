public import Foundation
import Logging
public import ServiceLifecycle
public import Store
import Synchronization

/// Wakes long-polls when a flow leaves `pending`, on whichever instance that
/// happened: every instance LISTENs on one channel and fans out by flow id.
/// After a reconnect every waiter wakes and re-reads, since a notification may
/// have been missed meanwhile.
public final class PostgresFlowSignals: FlowSignals, Service {
    package static let channel = "parley_flows"

    private let store: PostgresStore
    private let listener: NotificationListener
    /// Long-polls by flow id; closed when graceful shutdown starts, so they answer with what they have.
    private let waiters = KeyedWaiters<String>()

    public init(store: PostgresStore, listener: NotificationListener) {
        self.store = store
        self.listener = listener
    }

    public func announce(flowID: UUID) async throws {
        try await store.notify(channel: Self.channel, payload: flowID.uuidString.lowercased())
    }

    public func run() async throws {
        for await event in listener.notifications(channel: Self.channel).cancelOnGracefulShutdown() {
            switch event {
            case .notification(let flowID): wake { $0 == flowID }
            case .reconnected, .overflowed: wake { _ in true }
            default: break
            }
        }
        drain()
    }

    public func drain() { waiters.close() }

    /// Returns when `flowID` is notified, after `timeout`, or on cancellation; false once
    /// graceful shutdown has started.
    public func wait(for flowUUID: UUID, timeout: Duration) async -> Bool {
        await waiters.wait(for: flowUUID.uuidString.lowercased(), timeout: timeout)
        return !waiters.isClosed
    }

    private func wake(_ matches: (String) -> Bool) { waiters.wake(matches) }
}
