import Foundation
import Testing

import ParleyDomain

/// A value read before a change was announced is never cached after it: the soak's client-
/// credentials calls went out without a token for up to a minute when an instance cached
/// "no token" read while another instance replaced it.
@Suite struct InvalidatedCacheTests {
    @Test func aValueReadBeforeItsKeyWasRemovedIsNotStored() {
        let cache = InvalidatedCache<String, Int>(enabled: true)
        let mark = cache.mark()
        // … the value is read from the database; meanwhile another instance changes it …
        cache.remove("token")
        cache.set(1, for: "token", readSince: mark)
        #expect(cache.value(for: "token") == nil)
        // Read again after the change: stored.
        cache.set(2, for: "token", readSince: cache.mark())
        #expect(cache.value(for: "token") == 2)
    }

    @Test func otherKeysAndLaterReadsAreStillCached() {
        let cache = InvalidatedCache<String, Int>(enabled: true)
        let mark = cache.mark()
        cache.remove("another")
        cache.set(1, for: "token", readSince: mark)
        #expect(cache.value(for: "token") == 1)
    }

    @Test func aBulkRemovalOrASuspensionStopsEveryPendingRead() {
        let cache = InvalidatedCache<String, Int>(enabled: true)
        var mark = cache.mark()
        cache.removeAll()
        cache.set(1, for: "token", readSince: mark)
        #expect(cache.value(for: "token") == nil)
        mark = cache.mark()
        cache.setEnabled(false)
        cache.setEnabled(true)
        cache.set(1, for: "token", readSince: mark)
        #expect(cache.value(for: "token") == nil)
    }

    @Test func theRemovalRecordIsBounded() {
        let cache = InvalidatedCache<Int, Int>(capacity: 10, enabled: true)
        let mark = cache.mark()
        for key in 0..<50 { cache.remove(key) }
        // Past its capacity the record is forgotten as a bulk removal: still nothing stale stored.
        cache.set(1, for: 7, readSince: mark)
        cache.set(1, for: 99, readSince: mark)
        #expect(cache.value(for: 7) == nil)
        #expect(cache.value(for: 99) == nil)
    }

    /// A registration's entries go by its id, without a scan of the cache (a sign-in or a
    /// deregistration among 100,000 cached registrations held the lock for every lookup), and a
    /// value of its read before that is not stored after it, whatever its key.
    @Test func anOwnersEntriesGoTogetherAndNoEarlierReadComesBack() {
        let alice = UUID(), bob = UUID()
        let cache = InvalidatedCache<String, UUID>(enabled: true, owner: { $1 })
        for key in ["a1", "a2"] { cache.set(alice, for: key, readSince: cache.mark()) }
        cache.set(bob, for: "b1", readSince: cache.mark())
        let mark = cache.mark()
        cache.removeAll(owner: alice)
        #expect(cache.value(for: "a1") == nil && cache.value(for: "a2") == nil)
        #expect(cache.value(for: "b1") == bob)
        cache.set(alice, for: "a3", readSince: mark)
        #expect(cache.value(for: "a3") == nil, "read before alice's removal: not stored")
        cache.set(bob, for: "b2", readSince: mark)
        #expect(cache.value(for: "b2") == bob, "bob's read is not held back by alice's removal")
        cache.set(alice, for: "a3", readSince: cache.mark())
        #expect(cache.value(for: "a3") == alice)
        // An entry replaced by another owner's is that owner's; one removed stays removed.
        cache.set(bob, for: "a3", readSince: cache.mark())
        cache.removeAll(owner: alice)
        #expect(cache.value(for: "a3") == bob)
        cache.remove("b1")
        cache.removeAll(owner: bob)
        #expect(cache.value(for: "a3") == nil && cache.value(for: "b2") == nil)
    }

    /// An owner's entries are made stale, not dropped, by its removal: they stay stale through
    /// everything that forgets removals of single keys, and the cache's weight counts them until
    /// they are looked up (or shed, or expire).
    @Test func anOwnersRemovalOutlivesTheRecordOfSingleKeys() {
        let alice = UUID(), bob = UUID()
        let cache = InvalidatedCache<Int, UUID>(capacity: 10, enabled: true, owner: { $1 }, weight: { _ in 1 })
        cache.set(alice, for: 1, readSince: cache.mark())
        cache.set(bob, for: 2, readSince: cache.mark())
        cache.removeAll(owner: alice)
        #expect(cache.bytes == 2, "alice's entry is stale, not yet dropped")
        for key in 100..<150 { cache.remove(key) }  // past `capacity`: the record of keys is forgotten
        #expect(cache.value(for: 1) == nil, "still alice's stale entry")
        #expect(cache.value(for: 2) == bob)
        #expect(cache.bytes == 1, "dropped when looked up")
        cache.set(alice, for: 1, readSince: cache.mark())
        #expect(cache.value(for: 1) == alice, "read after the removal: cached")
    }

    /// Owners' removals older than the cache's lifetime are forgotten (no entry stored before
    /// them is alive), but a read begun before one of them is still refused.
    @Test func aForgottenOwnersRemovalStillRefusesAnEarlierRead() {
        let alice = UUID()
        let cache = InvalidatedCache<Int, UUID>(lifetime: .zero, enabled: true, owner: { $1 }, weight: { _ in 1 })
        let mark = cache.mark()
        cache.removeAll(owner: alice)
        for _ in 0..<1100 { cache.removeAll(owner: UUID()) }  // the record is pruned of the old ones
        cache.set(alice, for: 1, readSince: mark)
        #expect(cache.bytes == 0, "read before alice's removal: not stored")
        cache.set(alice, for: 2, readSince: cache.mark())
        #expect(cache.bytes == 1, "read after it: stored")
    }

    /// At its bound the cache sheds an eighth, not everything: emptied at once, every caller
    /// would go to the database in the same moment.
    @Test func aFullCacheShedsAnEighth() {
        let cache = InvalidatedCache<Int, Int>(capacity: 800, enabled: true)
        for key in 0..<800 { cache.set(key, for: key, readSince: cache.mark()) }
        cache.set(800, for: 800, readSince: cache.mark())
        let kept = (0...800).filter { cache.value(for: $0) != nil }.count
        #expect(kept == 701, "700 of the 800, and the new one")
    }

    /// Bounded by memory as well as count: what the entries weigh stays under `maxBytes` (an
    /// eighth shed when a new one would pass it), and one entry over an eighth is not kept.
    @Test func aCacheWithAWeightStaysUnderItsBytes() {
        let cache = InvalidatedCache<Int, Int>(enabled: true, weight: { $0 }, maxBytes: 1000)
        for key in 0..<10 { cache.set(100, for: key, readSince: cache.mark()) }
        #expect(cache.bytes == 1000)
        cache.set(100, for: 10, readSince: cache.mark())
        #expect(cache.bytes == 800, "shed to seven eighths, then the new one")
        #expect(cache.value(for: 10) == 100)
        cache.set(126, for: 11, readSince: cache.mark())
        #expect(cache.value(for: 11) == nil, "over an eighth of the bound: not cached")
        cache.remove(10)
        #expect(cache.bytes == 700)
        cache.removeAll()
        #expect(cache.bytes == 0)
    }
}
