import ParleyEncoding
internal import COpenSSL

/// SHA-256, one-shot or incremental. The hasher owns one `EVP_MD_CTX`, freed once.
public final class SHA256Hasher {
    private let ctx: OpaquePointer

    public init() {
        guard let ctx = EVP_MD_CTX_new(), EVP_DigestInit_ex(ctx, EVP_sha256(), nil) == 1 else {
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
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        let h = SHA256Hasher()
        h.update(bytes)
        return h.finalize()
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
