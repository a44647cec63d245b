/// Client tokens, flow secrets and admin tokens: shown once, stored only as SHA-256.
public enum SecretToken {
    /// A new secret with a recognisable prefix (`pct_` for client tokens).
    public static func generate(prefix: String) -> String {
        prefix + SecureRandom.token(byteCount: 32)
    }

    public static func hash(_ token: String) -> [UInt8] {
        SHA256.hash(token.utf8)
    }

    /// Constant-time check of a presented token against a stored hash.
    public static func matches(_ token: String, hash: [UInt8]) -> Bool {
        constantTimeEquals(SHA256.hash(token.utf8), hash)
    }
}
