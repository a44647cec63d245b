import ParleyEncoding
import ParleyCrypto
import Testing

@Suite struct SealingTests {
    let key1 = [UInt8](repeating: 1, count: 32)
    let key2 = [UInt8](repeating: 2, count: 32)

    @Test func roundTrip() throws {
        let ring = try KeyRing(keys: [("k1", key1)])
        let sealed = ring.seal("s3cret-token", associatedData: "tokens.access:42")
        #expect(!sealed.containsSubsequence(Array("s3cret".utf8)))
        #expect(try ring.openString(sealed, associatedData: "tokens.access:42") == "s3cret-token")
        #expect(KeyRing.keyID(of: sealed) == "k1")
    }

    @Test func emptyPlaintextRoundTrips() throws {
        let ring = try KeyRing(keys: [("k1", key1)])
        #expect(try ring.open(ring.seal([], associatedData: "x"), associatedData: "x") == [])
    }

    @Test func flippedBitFailsToOpen() throws {
        let ring = try KeyRing(keys: [("k1", key1)])
        let sealed = ring.seal("value", associatedData: "row:1")
        for index in [5, sealed.count / 2, sealed.count - 1] {
            var bad = sealed
            bad[index] ^= 0x01
            #expect(throws: SealingError.self) { try ring.open(bad, associatedData: "row:1") }
        }
    }

    @Test func wrongRowBindingFailsToOpen() throws {
        let ring = try KeyRing(keys: [("k1", key1)])
        let sealed = ring.seal("value", associatedData: "tokens.access:1")
        do {
            _ = try ring.open(sealed, associatedData: "tokens.access:2")
            Issue.record("a value bound to row 1 opened as row 2")
        } catch let error as SealingError {
            #expect(error.code == .authenticationFailed)
        }
    }

    @Test func unknownKeyIDFailsToOpen() throws {
        let sealed = try KeyRing(keys: [("old", key1)]).seal("value", associatedData: "r")
        let other = try KeyRing(keys: [("new", key2)])
        #expect(throws: SealingError.self) { try other.open(sealed, associatedData: "r") }
        do { _ = try other.open(sealed, associatedData: "r") } catch let e as SealingError { #expect(e.code == .unknownKey) }
    }

    @Test func rotationKeepsOldValuesReadable() throws {
        let before = try KeyRing(keys: [("k1", key1)])
        let old = before.seal("old value", associatedData: "r")
        let after = try KeyRing(keys: [("k2", key2), ("k1", key1)])
        #expect(try after.openString(old, associatedData: "r") == "old value")
        let new = after.seal("new value", associatedData: "r")
        #expect(KeyRing.keyID(of: new) == "k2")
        #expect(throws: SealingError.self) { try before.open(new, associatedData: "r") }
    }

    @Test func keyRingParsingReportsEveryProblem() throws {
        let good = "a:\(Base64.encode(key1)),b:\(Base64.encode(key2))"
        #expect(try KeyRing.parse(good).sealingKeyID == "a")
        do {
            _ = try KeyRing.parse("nocolon,short:AAAA,bad:***")
            Issue.record("expected a malformed key ring")
        } catch let e as SealingError {
            #expect(e.code == .malformedKeyRing)
            #expect(e.detail.contains("entry 1"))
            #expect(e.detail.contains("'bad' is not valid base64"))
        }
        #expect(throws: SealingError.self) { try KeyRing.parse("short:AAAA") }
        #expect(throws: SealingError.self) { try KeyRing.parse("") }
    }
}

@Suite struct DigestTests {
    @Test func sha256KnownVectors() {
        #expect(Hex.encode(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Hex.encode(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        // A string's bytes in place (one call of libcrypto) and bytes in no one piece (the hasher) agree.
        #expect(Hex.encode(SHA256.hash("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Hex.encode(SHA256.hash(AnySequence("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func incrementalEqualsOneShot() {
        let data = (0..<10_000).map { UInt8($0 % 251) }
        let h = SHA256Hasher()
        h.update(data[0..<3333])
        h.update(data[3333...])
        #expect(h.finalize() == SHA256.hash(data))
    }

    /// RFC 7636 appendix B: the S256 challenge of the example verifier.
    @Test func pkceS256Vector() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(Base64URL.encode(SHA256.hash(Array(verifier.utf8))) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func constantTimeCompare() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(constantTimeEquals([], []))
    }

    @Test func secretTokensHashAndMatch() {
        let t = SecretToken.generate(prefix: "pct_")
        #expect(t.hasPrefix("pct_"))
        #expect(t.count > 40)
        let h = SecretToken.hash(t)
        #expect(SecretToken.matches(t, hash: h))
        #expect(!SecretToken.matches(t + "x", hash: h))
        #expect(SecureRandom.bytes(32) != SecureRandom.bytes(32))
    }

    @Test func base64RoundTrips() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(($0 * 37) % 256) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
            #expect(Base64.decode(Base64URL.encode(bytes)) == bytes)
            #expect(Hex.decode(Hex.encode(bytes)) == bytes)
        }
        #expect(Base64.encode(Array("foobar".utf8)) == "Zm9vYmFy")
        #expect(Base64.encode(Array("fo".utf8)) == "Zm8=")
    }
}

extension Array where Element == UInt8 {
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard needle.count <= count else { return false }
        for i in 0...(count - needle.count) where Array(self[i..<(i + needle.count)]) == needle { return true }
        return false
    }
}
