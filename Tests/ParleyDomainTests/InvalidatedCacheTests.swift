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
        cache.removeAll { _, _ in false }
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
}
