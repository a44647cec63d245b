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
    /// The keys one owner (a registration) has in the cache: almost always one.
    private enum Owned {
        case one(Key)
        case many([Key])

        var keys: [Key] {
            switch self {
            case .one(let key): [key]
            case .many(let keys): keys
            }
        }

        func adding(_ key: Key) -> Owned {
            switch self {
            case .one(let existing): existing == key ? self : .many([existing, key])
            case .many(let keys): keys.contains(key) ? self : .many(keys + [key])
            }
        }

        /// Nil when nothing is left.
        func removing(_ key: Key) -> Owned? {
            switch self {
            case .one(let existing): return existing == key ? nil : self
            case .many(let keys):
                let left = keys.filter { $0 != key }
                return left.count == 1 ? .one(left[0]) : left.isEmpty ? nil : .many(left)
            }
        }
    }

    /// An entry, boxed: the dictionary's slots (a third to a half of them empty) then hold a
    /// reference, not a value as wide as a registration's record.
    private final class Entry: Sendable {
        let value: Value
        let until: ContinuousClock.Instant
        let bytes: Int

        init(_ value: Value, until: ContinuousClock.Instant, bytes: Int) {
            self.value = value
            self.until = until
            self.bytes = bytes
        }
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// What the entries weigh together (with `weight`).
        var bytes = 0
        /// The keys of each owner (with `owner`): a registration's entries go without a scan.
        var owned: [UUID: Owned] = [:]
        /// The count at each owner's last removal (as `removedAt`), bounded by `capacity`.
        var ownerRemovedAt: [UUID: UInt64] = [:]
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
            ownerRemovedAt.removeAll(keepingCapacity: true)
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

    /// Whose an entry is (a registration): `removeAll(owner:)` then finds its keys without a scan.
    private let owner: (@Sendable (Value) -> UUID?)?
    /// What an entry weighs in bytes, about; with `maxBytes` the cache is bounded by memory as well
    /// as by count (a registration's cookie jar may be large).
    private let weight: (@Sendable (Value) -> Int)?
    private let maxBytes: Int

    package init(
        lifetime: Duration = .seconds(60), capacity: Int = 100_000, enabled: Bool = false, owner: (@Sendable (Value) -> UUID?)? = nil,
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

    /// Drops `key`'s entry and its place in the owner index.
    private func drop(_ key: Key, from state: inout State) {
        guard let entry = dropEntry(key, from: &state), let owner, let id = owner(entry.value) else { return }
        state.owned[id] = state.owned[id]?.removing(key)
    }

    /// Drops `key`'s entry only (its owner's index goes with the owner).
    @discardableResult
    private func dropEntry(_ key: Key, from state: inout State) -> Entry? {
        guard let entry = state.entries.removeValue(forKey: key) else { return nil }
        state.bytes -= entry.bytes
        return entry
    }

    /// Files `key` under its owner `id` in the index.
    private func index(_ key: Key, under id: UUID, in state: inout State) {
        state.owned[id] = state.owned[id].map { $0.adding(key) } ?? .one(key)
    }

    /// The owner index and the weight again from the entries (after a pass that removed many).
    private func reindex(_ state: inout State) {
        state.bytes = state.entries.values.reduce(0) { $0 + $1.bytes }
        guard let owner else { return }
        state.owned.removeAll(keepingCapacity: true)
        for (key, entry) in state.entries {
            if let id = owner(entry.value) { index(key, under: id, in: &state) }
        }
    }

    /// Nothing cached, nothing indexed.
    private func empty(_ state: inout State) {
        state.entries.removeAll()
        state.owned.removeAll()
        state.bytes = 0
    }

    /// Full by count or by bytes: the expired go first; if that is not an eighth, an eighth goes
    /// (the dictionary's order, as good as random). Never all at once: a cache emptied at its
    /// bound would send every caller to the database in the same moment.
    private func shed(_ state: inout State, making room: Int) {
        let now = ContinuousClock.now
        state.entries = state.entries.filter { $0.value.until > now }
        reindex(&state)
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
            guard entry.until > now else {
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
        let id = owner?(value)
        let bytes = weight?(value) ?? 0
        guard bytes <= maxBytes / 8 else { return }  // one entry never takes more than an eighth
        state.withLock { state in
            guard state.enabled, state.bulkRemoval <= mark, state.removedAt[key, default: 0] <= mark,
                id.map({ state.ownerRemovedAt[$0, default: 0] <= mark }) ?? true
            else { return }
            drop(key, from: &state)
            if state.entries.count >= capacity || state.bytes + bytes > maxBytes { shed(&state, making: bytes) }
            state.entries[key] = Entry(value, until: until, bytes: bytes)
            state.bytes += bytes
            if let id { index(key, under: id, in: &state) }
        }
    }

    package func remove(_ key: Key) {
        state.withLock { state in
            state.removed(key, capacity: capacity)
            drop(key, from: &state)
        }
    }

    /// Every entry of `id` (needs `owner`), without a scan; a value of its read before this is
    /// never stored after it, whatever its key.
    package func removeAll(owner id: UUID) {
        state.withLock { state in
            state.removals &+= 1
            state.ownerRemovedAt[id] = state.removals
            if state.ownerRemovedAt.count > capacity { state.removedInBulk() }
            for key in state.owned.removeValue(forKey: id)?.keys ?? [] { dropEntry(key, from: &state) }
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
