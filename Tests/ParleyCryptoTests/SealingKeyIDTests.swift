import ParleyCrypto
import Testing

/// What `parley rekey` reads from a sealed value without opening it.
@Suite struct SealingKeyIDTests {
    let key1 = [UInt8](repeating: 1, count: 32)
    let key2 = [UInt8](repeating: 2, count: 32)

    @Test func theFirstKeysPrefixMarksWhatItSealed() throws {
        let old = try KeyRing(keys: [("k1", key1)])
        let ring = try KeyRing(keys: [("k2", key2), ("k1", key1)])
        let before = old.seal("value", associatedData: "row:1")
        let after = ring.seal("value", associatedData: "row:1")
        #expect(ring.sealingPrefix == [1, 2] + Array("k2".utf8))
        #expect(Array(after.prefix(ring.sealingPrefix.count)) == ring.sealingPrefix)
        #expect(Array(before.prefix(ring.sealingPrefix.count)) != ring.sealingPrefix)
        #expect(ring.isSealedWithFirstKey(after))
        #expect(!ring.isSealedWithFirstKey(before))
        #expect(old.isSealedWithFirstKey(before))
        #expect(!ring.isSealedWithFirstKey([]))
        #expect(!ring.isSealedWithFirstKey([1, 200, 0x6b]), "a length past the end is no key id")
        // Re-sealing keeps what opens, under the new key.
        let resealed = ring.seal(try ring.open(before, associatedData: "row:1"), associatedData: "row:1")
        #expect(ring.isSealedWithFirstKey(resealed))
        #expect(try ring.openString(resealed, associatedData: "row:1") == "value")
    }

    @Test func aLongerKeyIDWithTheSamePrefixIsAnotherKey() throws {
        let ring = try KeyRing(keys: [("k2", key2)])
        let other = try KeyRing(keys: [("k2x", key1)])
        let sealed = other.seal("value", associatedData: "row:1")
        #expect(Array(sealed.prefix(ring.sealingPrefix.count)) != ring.sealingPrefix)
        #expect(!ring.isSealedWithFirstKey(sealed))
    }
}
