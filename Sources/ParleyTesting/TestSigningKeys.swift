import Foundation
import ParleyCrypto

/// Private keys made with the `openssl` CLI for `PARLEY_SIGNING_KEYS`: an RSA 2048 key and a
/// P-256 key (PKCS#8 PEM), in a new temporary directory until `remove()`.
public struct TestSigningKeys: Sendable {
    public let directory: String
    public let rsaKeyPath: String
    public let ecKeyPath: String

    public static func generate() throws -> TestSigningKeys {
        let dir = NSTemporaryDirectory() + "parley-signing-" + SecureRandom.token(byteCount: 8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try ExternalTool.run("openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.pem"], in: dir)
        try ExternalTool.run("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ec.pem"], in: dir)
        return TestSigningKeys(directory: dir, rsaKeyPath: dir + "/rsa.pem", ecKeyPath: dir + "/ec.pem")
    }

    public func remove() { try? FileManager.default.removeItem(atPath: directory) }
}
