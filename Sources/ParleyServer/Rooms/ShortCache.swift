import Synchronization

/// A small per-instance cache whose entries live at most `lifetime`. It spares the hot
/// proxy path a database round trip per request while keeping every instance at most
/// `lifetime` behind a change made elsewhere (revocations must hold within 1 s).
/// Local changes invalidate at once.
final class ShortCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let entries = Mutex<[Key: (value: Value, until: ContinuousClock.Instant)]>([:])
    private let lifetime: Duration
    private let capacity: Int

    init(lifetime: Duration, capacity: Int = 10_000) {
        self.lifetime = lifetime
        self.capacity = capacity
    }

    func value(for key: Key) -> Value? {
        let now = ContinuousClock.now
        return entries.withLock { entries in
            guard let entry = entries[key] else { return nil }
            guard entry.until > now else {
                entries[key] = nil
                return nil
            }
            return entry.value
        }
    }

    func set(_ value: Value, for key: Key) {
        let until = ContinuousClock.now + lifetime
        entries.withLock { entries in
            if entries.count >= capacity {
                let now = ContinuousClock.now
                entries = entries.filter { $0.value.until > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[key] = (value, until)
        }
    }

    func remove(_ key: Key) { _ = entries.withLock { $0.removeValue(forKey: key) } }

    func removeAll() { entries.withLock { $0.removeAll() } }
}
