import Synchronization

/// The `wait=S` of a long-poll (`GET /v1/flows/{id}`, `GET /v1/registrations/me`): seconds,
/// clamped to `0...maxSeconds`; a value that is not a number waits not at all.
package enum LongPoll {
    package static let maxSeconds: Double = 60

    /// `wait`: the query parameter as it came, if it came.
    package static func seconds(_ wait: String?) -> Double {
        let requested = wait.flatMap { Double($0) } ?? 0
        return requested.isFinite ? min(maxSeconds, max(0, requested)) : 0
    }
}

/// Long-polls that wait for news of one key (a flow, a registration): `wait` returns when its
/// key is woken, after `timeout`, or on cancellation, whichever comes first; `wake` resumes the
/// waiters of the keys it matches. A waiter never outlives its timeout.
public final class KeyedWaiters<Key: Hashable & Sendable>: Sendable {
    private struct Waiter {
        package let key: Key
        package let continuation: CheckedContinuation<Void, Never>
    }

    private let waiters = Mutex<(next: Int, all: [Int: Waiter])>((0, [:]))
    /// Once closed (graceful shutdown), every wait returns at once.
    private let closed = Atomic<Bool>(false)

    public init() {}

    public var isClosed: Bool { closed.load(ordering: .sequentiallyConsistent) }

    public func wait(for key: Key, timeout: Duration) async {
        guard !isClosed else { return }
        let id = waiters.withLock { state -> Int in
            state.next += 1
            return state.next
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let done = self.waiters.withLock { state -> Bool in
                            if Task.isCancelled || self.isClosed { return true }
                            state.all[id] = Waiter(key: key, continuation: continuation)
                            return false
                        }
                        if done { continuation.resume() }
                    }
                } onCancel: {
                    self.waiters.withLock { $0.all.removeValue(forKey: id) }?.continuation.resume()
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    public func wake(_ matches: (Key) -> Bool) {
        let woken = waiters.withLock { state -> [Waiter] in
            let hit = state.all.filter { matches($0.value.key) }
            for id in hit.keys { state.all[id] = nil }
            return Array(hit.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    /// Every wait, now and later, returns at once.
    public func close() {
        closed.store(true, ordering: .sequentiallyConsistent)
        wake { _ in true }
    }
}
