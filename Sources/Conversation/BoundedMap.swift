public import Foundation

/// A map with a ceiling and an age limit, for per-key state whose keys a client can multiply
/// (registrations, origins): at most `capacity` entries, each forgotten once unused for
/// `idleLifetime`. Past the ceiling the least recently used tenth goes at once, so that a
/// churn of keys costs amortised O(log n) per insert, not a scan each time. A value type, to
/// keep behind the owner's one lock.
public struct BoundedMap<Key: Hashable, Value> {
    private var entries: [Key: (value: Value, lastUsed: Date)] = [:]
    public let capacity: Int
    public let idleLifetime: TimeInterval

    public init(capacity: Int, idleLifetime: Duration) {
        self.capacity = max(1, capacity)
        self.idleLifetime = idleLifetime.timeInterval
    }

    public var count: Int { entries.count }

    /// The value, when it was used within `idleLifetime`; reading it counts as a use.
    public mutating func value(for key: Key, now: Date) -> Value? {
        guard let entry = entries[key] else { return nil }
        guard now.timeIntervalSince(entry.lastUsed) < idleLifetime else {
            entries[key] = nil
            return nil
        }
        entries[key] = (entry.value, now)
        return entry.value
    }

    /// Sets (or, with nil, removes) a value; at the ceiling, expired entries go first, then the
    /// least recently used tenth.
    public mutating func set(_ value: Value?, for key: Key, now: Date) {
        guard let value else {
            entries[key] = nil
            return
        }
        if entries[key] == nil && entries.count >= capacity {
            entries = entries.filter { now.timeIntervalSince($0.value.lastUsed) < idleLifetime }
            if entries.count >= capacity {
                let drop = max(1, capacity / 10)
                for (old, _) in entries.sorted(by: { $0.value.lastUsed < $1.value.lastUsed }).prefix(drop) { entries[old] = nil }
            }
        }
        entries[key] = (value, now)
    }

    public mutating func removeAll() { entries.removeAll() }

    public mutating func removeAll(where shouldRemove: (Key) -> Bool) {
        entries = entries.filter { !shouldRemove($0.key) }
    }
}
