import Synchronization

/// Hits and misses of a per-instance cache.
public struct CacheStatistics: Sendable {
    public var hits: Int
    public var misses: Int
}

/// A repository that keeps a per-instance cache.
public protocol CacheStatisticsSource: Sendable {
    var cacheStatistics: CacheStatistics { get }
}

/// A per-instance cache kept current by cache signals (`LISTEN/NOTIFY`), not by a clock:
/// an entry goes when a change to its registration is announced, from any instance.
/// While the signal is lost the cache is suspended: it holds and serves nothing, so no
/// instance acts on a view it cannot hear about. `lifetime` is only a safety net.
package final class InvalidatedCache<Key: Hashable & Sendable, Value: Sendable>: CacheStatisticsSource {
    private struct State {
        package var entries: [Key: (value: Value, until: ContinuousClock.Instant)] = [:]
        /// Until the signal is up, nothing is cached.
        package var enabled = false
        /// Removals so far, counted: a value read before the removal of its key is never
        /// stored after it (`mark`, `set(_:for:readSince:)`).
        package var removals: UInt64 = 0
        /// The count at each key's last removal, bounded by `capacity` …
        package var removedAt: [Key: UInt64] = [:]
        /// … and at the last removal of many keys (or of a forgotten `removedAt`).
        package var bulkRemoval: UInt64 = 0

        package mutating func removed(_ key: Key, capacity: Int) {
            removals &+= 1
            removedAt[key] = removals
            if removedAt.count > capacity { removedInBulk() }
        }

        package mutating func removedInBulk() {
            removals &+= 1
            bulkRemoval = removals
            removedAt.removeAll(keepingCapacity: true)
        }
    }

    private let state = Mutex(State())
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)

    /// Lookups answered from the cache and not, since start (for `/metrics`).
    package var statistics: CacheStatistics { CacheStatistics(hits: hits.load(ordering: .relaxed), misses: misses.load(ordering: .relaxed)) }
    package var cacheStatistics: CacheStatistics { statistics }
    private let lifetime: Duration
    private let capacity: Int

    package init(lifetime: Duration = .seconds(60), capacity: Int = 100_000, enabled: Bool = false) {
        self.lifetime = lifetime
        self.capacity = capacity
        state.withLock { $0.enabled = enabled }
    }

    package func value(for key: Key) -> Value? {
        let now = ContinuousClock.now
        let found = state.withLock { state -> Value? in
            guard state.enabled, let entry = state.entries[key] else { return nil }
            guard entry.until > now else {
                state.entries[key] = nil
                return nil
            }
            return entry.value
        }
        if found == nil { misses.add(1, ordering: .relaxed) } else { hits.add(1, ordering: .relaxed) }
        return found
    }

    /// Taken before reading the value that `set` will store. A change announced while the
    /// value is read (its removal) makes that `set` store nothing: otherwise the value read
    /// before the change would be cached after it, and served for the whole `lifetime`.
    package func mark() -> UInt64 { state.withLock { $0.removals } }

    /// Stores `value`, read after `mark` was taken, unless its key (or everything) was removed since.
    package func set(_ value: Value, for key: Key, readSince mark: UInt64) {
        let until = ContinuousClock.now + lifetime
        state.withLock { state in
            guard state.enabled, state.bulkRemoval <= mark, state.removedAt[key, default: 0] <= mark else { return }
            if state.entries.count >= capacity {
                let now = ContinuousClock.now
                state.entries = state.entries.filter { $0.value.until > now }
                if state.entries.count >= capacity { state.entries.removeAll(keepingCapacity: true) }
            }
            state.entries[key] = (value, until)
        }
    }

    package func remove(_ key: Key) {
        state.withLock { state in
            state.removed(key, capacity: capacity)
            state.entries.removeValue(forKey: key)
        }
    }

    package func removeAll(where matches: (Key, Value) -> Bool) {
        state.withLock { state in
            state.removedInBulk()
            state.entries = state.entries.filter { !matches($0.key, $0.value.value) }
        }
    }

    package func removeAll() {
        state.withLock { state in
            state.removedInBulk()
            state.entries.removeAll()
        }
    }

    /// Follows the cache signal: `suspended` empties and stops the cache, `resumed` starts it.
    package func setEnabled(_ enabled: Bool) {
        state.withLock { state in
            state.enabled = enabled
            state.removedInBulk()
            if !enabled { state.entries.removeAll() }
        }
    }
}
