import ParleyEncoding
internal import COpenSSL

/// Why a key ring or a sealed value was refused. Never carries key material or plaintext.
public struct SealingError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        case malformedKeyRing
        case unknownKey
        case malformedValue
        case authenticationFailed
    }

    public let code: Code
    public let detail: String

    init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { detail }
}

/// AES-256-GCM under a key ring. The first key seals; every key opens, so keys
/// rotate by putting a new key first and keeping the old one until rows are resealed.
///
/// A sealed value is `0x01 | len(kid) | kid | nonce(12) | ciphertext | tag(16)`.
/// Associated data (for example `"tokens.access:<row id>"`) binds it to its row:
/// the same bytes copied into another row do not open.
public struct KeyRing: Sendable {
    public struct Key: Sendable {
        public let id: String
        fileprivate let bytes: [UInt8]
    }

    public let keys: [Key]
    public var sealingKeyID: String { keys[0].id }

    public init(keys: [(id: String, bytes: [UInt8])]) throws {
        guard !keys.isEmpty else { throw SealingError(.malformedKeyRing, "the key ring has no keys") }
        var seen = Set<String>()
        var out: [Key] = []
        for (id, bytes) in keys {
            guard !id.isEmpty, id.utf8.count < 256, id.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: ":") }) else {
                throw SealingError(.malformedKeyRing, "key id '\(id)' must be 1-255 printable characters without ',' or ':'")
            }
            guard bytes.count == 32 else {
                throw SealingError(.malformedKeyRing, "key '\(id)' must be 32 bytes, found \(bytes.count)")
            }
            guard seen.insert(id).inserted else { throw SealingError(.malformedKeyRing, "key id '\(id)' appears twice") }
            out.append(Key(id: id, bytes: bytes))
        }
        self.keys = out
    }

    /// Parses `kid:base64(32 bytes)[,kid:base64…]`, reporting every problem at once.
    public static func parse(_ text: String) throws -> KeyRing {
        var problems: [String] = []
        var keys: [(String, [UInt8])] = []
        for (index, part) in text.split(separator: ",", omittingEmptySubsequences: false).enumerated() {
            let entry = part.trimmingSpaces()
            guard let colon = entry.firstIndex(of: ":") else {
                problems.append("entry \(index + 1) is not 'kid:base64key'")
                continue
            }
            let id = String(entry[..<colon])
            guard let bytes = Base64.decode(String(entry[entry.index(after: colon)...])) else {
                problems.append("key '\(id)' is not valid base64")
                continue
            }
            keys.append((id, bytes))
        }
        if problems.isEmpty {
            do { return try KeyRing(keys: keys) } catch let e as SealingError { problems.append(e.detail) }
        }
        throw SealingError(.malformedKeyRing, "PARLEY_ENCRYPTION_KEYS: " + problems.joined(separator: "; "))
    }

    public func seal(_ plaintext: [UInt8], associatedData: String) -> [UInt8] {
        let key = keys[0]
        let nonce = SecureRandom.bytes(12)
        let aad = Array(associatedData.utf8)
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count)
        var tag = [UInt8](repeating: 0, count: 16)
        let ctx = EVP_CIPHER_CTX_new()!
        defer { EVP_CIPHER_CTX_free(ctx) }
        var len: Int32 = 0
        var ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
        ok = ok && c_parley_gcm_set_ivlen(ctx, 12) == 1
        ok = ok && EVP_EncryptInit_ex(ctx, nil, nil, key.bytes, nonce) == 1
        if !aad.isEmpty { ok = ok && EVP_EncryptUpdate(ctx, nil, &len, aad, Int32(aad.count)) == 1 }
        if !plaintext.isEmpty {
            ok = ok && ciphertext.withUnsafeMutableBufferPointer { out in
                EVP_EncryptUpdate(ctx, out.baseAddress, &len, plaintext, Int32(plaintext.count)) == 1
            }
        }
        var finalLen: Int32 = 0
        var scratch = [UInt8](repeating: 0, count: 16)
        ok = ok && EVP_EncryptFinal_ex(ctx, &scratch, &finalLen) == 1
        ok = ok && c_parley_gcm_get_tag(ctx, &tag, 16) == 1
        precondition(ok, "libcrypto AES-256-GCM sealing failed")
        let kid = Array(key.id.utf8)
        return [1, UInt8(kid.count)] + kid + nonce + ciphertext + tag
    }

    public func seal(_ plaintext: String, associatedData: String) -> [UInt8] {
        seal(Array(plaintext.utf8), associatedData: associatedData)
    }

    public func open(_ sealed: [UInt8], associatedData: String) throws -> [UInt8] {
        guard sealed.count >= 2 + 12 + 16, sealed[0] == 1 else { throw SealingError(.malformedValue, "sealed value is malformed") }
        let kidLength = Int(sealed[1])
        guard sealed.count >= 2 + kidLength + 12 + 16 else { throw SealingError(.malformedValue, "sealed value is malformed") }
        let kid = String(decoding: sealed[2..<(2 + kidLength)], as: UTF8.self)
        guard let key = keys.first(where: { $0.id == kid }) else {
            throw SealingError(.unknownKey, "sealed with key '\(kid)', which is not in the key ring")
        }
        let nonceStart = 2 + kidLength
        let nonce = Array(sealed[nonceStart..<(nonceStart + 12)])
        let body = Array(sealed[(nonceStart + 12)..<(sealed.count - 16)])
        let tag = Array(sealed[(sealed.count - 16)...])
        let aad = Array(associatedData.utf8)
        var plaintext = [UInt8](repeating: 0, count: body.count)
        let ctx = EVP_CIPHER_CTX_new()!
        defer { EVP_CIPHER_CTX_free(ctx) }
        var len: Int32 = 0
        var ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
        ok = ok && c_parley_gcm_set_ivlen(ctx, 12) == 1
        ok = ok && EVP_DecryptInit_ex(ctx, nil, nil, key.bytes, nonce) == 1
        if !aad.isEmpty { ok = ok && EVP_DecryptUpdate(ctx, nil, &len, aad, Int32(aad.count)) == 1 }
        if !body.isEmpty {
            ok = ok && plaintext.withUnsafeMutableBufferPointer { out in
                EVP_DecryptUpdate(ctx, out.baseAddress, &len, body, Int32(body.count)) == 1
            }
        }
        ok = ok && c_parley_gcm_set_tag(ctx, tag, 16) == 1
        var finalLen: Int32 = 0
        var scratch = [UInt8](repeating: 0, count: 16)
        ok = ok && EVP_DecryptFinal_ex(ctx, &scratch, &finalLen) == 1
        guard ok else { throw SealingError(.authenticationFailed, "sealed value did not authenticate") }
        return plaintext
    }

    public func openString(_ sealed: [UInt8], associatedData: String) throws -> String {
        String(decoding: try open(sealed, associatedData: associatedData), as: UTF8.self)
    }

    /// The id of the key a value was sealed with, if it is well-formed.
    public static func keyID(of sealed: [UInt8]) -> String? {
        guard sealed.count >= 2, sealed[0] == 1, sealed.count >= 2 + Int(sealed[1]) else { return nil }
        return String(decoding: sealed[2..<(2 + Int(sealed[1]))], as: UTF8.self)
    }

    /// The bytes every value sealed under the first key starts with (`0x01 | len(kid) | kid`):
    /// values sealed under another key can be found by their first bytes, without opening them.
    public var sealingPrefix: [UInt8] {
        let kid = Array(keys[0].id.utf8)
        return [1, UInt8(kid.count)] + kid
    }

    /// Whether `sealed` was sealed under the first key (the one `seal` uses now).
    public func isSealedWithFirstKey(_ sealed: [UInt8]) -> Bool {
        Self.keyID(of: sealed) == sealingKeyID
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var s = self
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return s
    }
}

/// Printed, a key ring names its key ids only: `"\(keyRing)"` (a debug log of a service that
/// holds one, say) never shows key bytes.
extension KeyRing: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "KeyRing(keys: \(keys.map(\.id).joined(separator: ", ")))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["keyIDs": keys.map(\.id)], displayStyle: .struct) }
}

extension KeyRing.Key: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "Key(id: \(id))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["id": id], displayStyle: .struct) }
}
