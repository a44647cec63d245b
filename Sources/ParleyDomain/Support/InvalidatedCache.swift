package import Foundation
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
    /// An entry, boxed: the dictionary's slots (a third to a half of them empty) then hold a
    /// reference, not a value as wide as a registration's record.
    /// Its fields in this order (the owner's optional before the 4-byte weight) fit a boxed
    /// reference's entry in 80 bytes of the allocator's, not 96.
    private final class Entry: Sendable {
        let value: Value
        let until: ContinuousClock.Instant
        /// The removal count when it was stored, and whose it is: a later removal of its owner
        /// makes it stale (`removeAll(owner:)` drops it when it is next looked up, not at once).
        let stored: UInt64
        let owner: UUID?
        /// An entry over an eighth of `maxBytes` is never stored, so its weight fits 32 bits.
        let weight: Int32

        var bytes: Int { Int(weight) }

        init(_ value: Value, until: ContinuousClock.Instant, bytes: Int, owner: UUID?, stored: UInt64) {
            self.value = value
            self.until = until
            self.stored = stored
            self.owner = owner
            self.weight = Int32(clamping: bytes)
        }
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// What the entries weigh together (with `weight`).
        var bytes = 0
        /// The count and time of each owner's last removal (as `removedAt`) within the last
        /// `lifetime`: an entry stored before it is stale. Older ones are forgotten (every entry
        /// stored before them has expired); beyond `capacity` of them, everything goes.
        var ownerRemovedAt: [UUID: (count: UInt64, at: ContinuousClock.Instant)] = [:]
        /// When `ownerRemovedAt` is next pruned of the old ones.
        var pruneOwnersAt = 1024
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

        /// Every read begun before now is refused; the owners' removals stay (entries stored
        /// before them are still stale) until the entries go too (`empty`).
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

    /// Whose an entry is (a registration), from its key or its value: `removeAll(owner:)` makes
    /// its entries stale without a scan.
    private let owner: (@Sendable (Key, Value) -> UUID?)?
    /// What an entry weighs in bytes, about; with `maxBytes` the cache is bounded by memory as well
    /// as by count (a registration's cookie jar may be large).
    private let weight: (@Sendable (Value) -> Int)?
    private let maxBytes: Int

    package init(
        lifetime: Duration = .seconds(60), capacity: Int = 100_000, enabled: Bool = false, owner: (@Sendable (Key, Value) -> UUID?)? = nil,
        weight: (@Sendable (Value) -> Int)? = nil, maxBytes: Int = .max
    ) {
        self.lifetime = lifetime
        self.capacity = capacity
        self.owner = owner
        self.weight = weight
        self.maxBytes = maxBytes
        state.withLock { $0.enabled = enabled }
    }

    /// What the entries weigh together now (0 without `weight`).
    package var bytes: Int { state.withLock { $0.bytes } }

    /// Drops `key`'s entry.
    private func drop(_ key: Key, from state: inout State) {
        guard let entry = state.entries.removeValue(forKey: key) else { return }
        state.bytes -= entry.bytes
    }

    /// Whether `entry` is still good: not expired, and its owner not removed since it was stored.
    private func isCurrent(_ entry: Entry, in state: State, now: ContinuousClock.Instant) -> Bool {
        guard entry.until > now else { return false }
        guard let id = entry.owner, let removed = state.ownerRemovedAt[id] else { return true }
        return removed.count <= entry.stored
    }

    /// Nothing cached, so no owner's removal matters to an entry (to a read begun before it,
    /// `removedInBulk` answers).
    private func empty(_ state: inout State) {
        state.entries.removeAll()
        state.bytes = 0
        state.ownerRemovedAt.removeAll()
        state.pruneOwnersAt = 1024
    }

    /// Full by count or by bytes: the expired go first; if that is not an eighth, an eighth goes
    /// (the dictionary's order, as good as random). Never all at once: a cache emptied at its
    /// bound would send every caller to the database in the same moment.
    private func shed(_ state: inout State, making room: Int) {
        let now = ContinuousClock.now
        state.entries = state.entries.filter { isCurrent($0.value, in: state, now: now) }
        state.bytes = state.entries.values.reduce(0) { $0 + $1.bytes }
        let keepCount = capacity - capacity / 8
        let keepBytes = maxBytes == .max ? Int.max : maxBytes - maxBytes / 8
        guard state.entries.count > keepCount || state.bytes + room > keepBytes else { return }
        for key in Array(state.entries.keys) {
            guard state.entries.count > keepCount || state.bytes + room > keepBytes else { break }
            drop(key, from: &state)
        }
    }

    package func value(for key: Key) -> Value? {
        let now = ContinuousClock.now
        let found = state.withLock { state -> Value? in
            guard state.enabled, let entry = state.entries[key] else { return nil }
            guard isCurrent(entry, in: state, now: now) else {
                drop(key, from: &state)
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
        let id = owner?(key, value)
        let bytes = weight?(value) ?? 0
        guard bytes <= maxBytes / 8, bytes <= Int(Int32.max) else { return }  // one entry never takes more than an eighth
        state.withLock { state in
            guard state.enabled, state.bulkRemoval <= mark, state.removedAt[key, default: 0] <= mark,
                id.map({ (state.ownerRemovedAt[$0]?.count ?? 0) <= mark }) ?? true
            else { return }
            drop(key, from: &state)
            if state.entries.count >= capacity || state.bytes + bytes > maxBytes { shed(&state, making: bytes) }
            state.entries[key] = Entry(value, until: until, bytes: bytes, owner: id, stored: state.removals)
            state.bytes += bytes
        }
    }

    package func remove(_ key: Key) {
        state.withLock { state in
            state.removed(key, capacity: capacity)
            drop(key, from: &state)
        }
    }

    /// Every entry of `id` (needs `owner`), without a scan and without an index of each owner's
    /// keys (at 100,000 registrations such an index cost more than a cached token): its entries
    /// are stale from now on, each dropped when it is next looked up, shed or expired. A value of
    /// its read before this is never stored after it, whatever its key.
    package func removeAll(owner id: UUID) {
        state.withLock { state in
            // Read under the lock: every entry stored before this removal took its time (and its
            // expiry) earlier, so when this removal is old enough to be forgotten, they have expired.
            let now = ContinuousClock.now
            state.removals &+= 1
            state.ownerRemovedAt[id] = (state.removals, now)
            guard state.ownerRemovedAt.count >= state.pruneOwnersAt else { return }
            // Removals older than `lifetime` matter to no entry (all stored before them have
            // expired), only to a read begun that long ago: those are refused from now on.
            let horizon = now - lifetime
            for (owner, removed) in state.ownerRemovedAt where removed.at < horizon {
                state.bulkRemoval = max(state.bulkRemoval, removed.count)
                state.ownerRemovedAt[owner] = nil
            }
            if state.ownerRemovedAt.count > capacity {
                state.removedInBulk()
                empty(&state)
            }
            state.pruneOwnersAt = max(1024, state.ownerRemovedAt.count * 2)
        }
    }

    package func removeAll() {
        state.withLock { state in
            state.removedInBulk()
            empty(&state)
        }
    }

    /// Follows the cache signal: `suspended` empties and stops the cache, `resumed` starts it.
    package func setEnabled(_ enabled: Bool) {
        state.withLock { state in
            state.enabled = enabled
            state.removedInBulk()
            if !enabled { empty(&state) }
        }
    }
}
