import ParleyEncoding
internal import COpenSSL

/// SHA-256, one-shot or incremental. The hasher owns one `EVP_MD_CTX`, freed once.
public final class SHA256Hasher {
    private let ctx: OpaquePointer

    public init() {
        guard let ctx = EVP_MD_CTX_new(), EVP_DigestInit_ex(ctx, SHA256.fetched ?? EVP_sha256(), nil) == 1 else {
            fatalError("libcrypto could not create a SHA-256 context")
        }
        self.ctx = ctx
    }

    deinit { EVP_MD_CTX_free(ctx) }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(ctx, base, bytes.count)
    }

    public func update(_ bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The digest; the hasher must not be used afterwards.
    public func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &out, &len)
        return out
    }
}

public enum SHA256 {
    /// One call of libcrypto for bytes in one piece (a client token's hash on every proxied
    /// call: no hasher object, no copy of the bytes). Like every hasher it uses the digest
    /// fetched once, where `EVP_sha256()` has libcrypto look it up again in every init.
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        if let digest = bytes.withContiguousStorageIfAvailable({ oneShot(UnsafeRawBufferPointer($0)) }), let digest {
            return digest
        }
        let h = SHA256Hasher()
        h.update(bytes)
        return h.finalize()
    }

    /// Nil when libcrypto fails (out of memory) or there is nothing to hash: the hasher then does it.
    private static func oneShot(_ data: UnsafeRawBufferPointer) -> [UInt8]? {
        guard let base = data.baseAddress, data.count > 0, let md = fetched else { return nil }
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { EVP_Digest(base, data.count, $0.baseAddress, &length, md, nil) }
        return ok == 1 && length == 32 ? out : nil
    }

    /// SHA-256 as fetched once (nil if libcrypto could not): the one-shot hash and every hasher use it.
    static var fetched: OpaquePointer? { Fetched.sha256.md }

    /// SHA-256 fetched from libcrypto's provider once, for the life of the process. An `EVP_MD`
    /// is immutable once fetched and may be used by any number of threads at once (OpenSSL's
    /// `EVP_MD_fetch(3)`), hence `@unchecked Sendable`.
    private final class Fetched: @unchecked Sendable {
        static let sha256 = Fetched(EVP_MD_fetch(nil, "SHA256", nil))
        let md: OpaquePointer?
        private init(_ md: OpaquePointer?) { self.md = md }
    }
}

public enum HMACSHA256 {
    public static func authenticate(_ message: [UInt8], key: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        _ = key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), m.bindMemory(to: UInt8.self).baseAddress, m.count, &out, &len)
            }
        }
        return out
    }
}

/// Compares two byte strings in time that depends only on their lengths.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { pa in
        b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 }
    }
}

public enum SecureRandom {
    /// `count` bytes from the OpenSSL CSPRNG.
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count == 0 || RAND_bytes(&out, Int32(count)) == 1 else {
            fatalError("libcrypto RAND_bytes failed: no secure randomness available")
        }
        return out
    }

    /// An unguessable URL-safe token with `byteCount` bytes of entropy.
    public static func token(byteCount: Int = 32) -> String {
        Base64URL.encode(bytes(byteCount))
    }
}
