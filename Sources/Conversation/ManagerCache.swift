import Foundation
import Synchronization

/// Conversation managers built lazily per registration and evicted when idle, so
/// a million registrations cost rows, not memory. Eviction happens on access
/// (no background task), in a full pass now and then.
public final class ManagerCache<Key: Hashable & Sendable>: Sendable {
    /// A manager is a reference (`ConversationManager` keeps its parts in one object): a slot
    /// of the dictionary, a third to a half of them empty, holds that and a date.
    private struct Entry {
        var manager: ConversationManager
        var lastUsed: Date
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var lastSweep = Date.distantPast
    }

    private let state = Mutex(State())
    private let idleTimeout: TimeInterval
    private let capacity: Int
    private let clock: any WallClock

    public init(idleTimeout: Duration = .seconds(600), capacity: Int = 100_000, clock: any WallClock = SystemClock()) {
        self.idleTimeout = idleTimeout.timeInterval
        self.capacity = capacity
        self.clock = clock
    }

    /// The cached manager for `key`, or a new one from `build`.
    public func manager(for key: Key, build: () throws -> ConversationManager) rethrows -> ConversationManager {
        let now = clock.now
        if let cached = state.withLock({ state -> ConversationManager? in
            sweep(&state, now: now)
            guard var entry = state.entries[key] else { return nil }
            entry.lastUsed = now
            state.entries[key] = entry
            return entry.manager
        }) {
            return cached
        }
        let built = try build()
        return state.withLock { state in
            if let raced = state.entries[key] { return raced.manager }
            if state.entries.count >= capacity, let oldest = state.entries.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
                state.entries[oldest.key] = nil
            }
            state.entries[key] = Entry(manager: built, lastUsed: now)
            return built
        }
    }

    /// Forgets a registration's manager (deregistration, revocation, new credentials).
    public func evict(_ key: Key) {
        state.withLock { _ = $0.entries.removeValue(forKey: key) }
    }

    /// Forgets every manager (a lost cache signal: anything may have changed meanwhile).
    public func evictAll() {
        state.withLock { $0.entries.removeAll() }
    }

    public var count: Int { state.withLock { $0.entries.count } }

    /// Removes idle entries: a full pass at most once per tenth of the idle timeout (at
    /// least once a second), so a call costs a dictionary lookup and the pass is amortised
    /// over every call in between, however many registrations are active.
    private func sweep(_ state: inout State, now: Date) {
        guard now.timeIntervalSince(state.lastSweep) >= max(1, idleTimeout / 10) else { return }
        state.lastSweep = now
        state.entries = state.entries.filter { now.timeIntervalSince($0.value.lastUsed) <= idleTimeout }
    }
}
