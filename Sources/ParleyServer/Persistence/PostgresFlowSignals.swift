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
    static let channel = "parley_flows"

    private struct Waiter {
        let flowID: String
        let continuation: CheckedContinuation<Void, Never>
    }

    private let store: PostgresStore
    private let listener: NotificationListener
    private let waiters = Mutex<(next: Int, all: [Int: Waiter])>((0, [:]))
    /// Set when graceful shutdown starts: waiting long-polls answer with what they have.
    private let draining = Atomic<Bool>(false)

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

    public func drain() {
        draining.store(true, ordering: .sequentiallyConsistent)
        wake { _ in true }
    }

    /// Returns when `flowID` is notified, after `timeout`, or on cancellation; false once
    /// graceful shutdown has started.
    public func wait(for flowUUID: UUID, timeout: Duration) async -> Bool {
        guard !draining.load(ordering: .sequentiallyConsistent) else { return false }
        let flowID = flowUUID.uuidString.lowercased()
        let id = waiters.withLock { state -> Int in
            state.next += 1
            return state.next
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let cancelled = self.waiters.withLock { state -> Bool in
                            if Task.isCancelled || self.draining.load(ordering: .sequentiallyConsistent) { return true }
                            state.all[id] = Waiter(flowID: flowID, continuation: continuation)
                            return false
                        }
                        if cancelled { continuation.resume() }
                    }
                } onCancel: {
                    self.waiters.withLock { $0.all.removeValue(forKey: id) }?.continuation.resume()
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
        return !draining.load(ordering: .sequentiallyConsistent)
    }

    private func wake(_ matches: (String) -> Bool) {
        let woken = waiters.withLock { state -> [Waiter] in
            let hit = state.all.filter { matches($0.value.flowID) }
            for key in hit.keys { state.all[key] = nil }
            return Array(hit.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }
}
