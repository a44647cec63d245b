import Foundation
import ParleyCrypto

/// Private keys made with the `openssl` CLI for `PARLEY_SIGNING_KEYS`: an RSA 2048 key and a
/// P-256 key (PKCS#8 PEM), and the RSA key again followed by a self-signed certificate of it
/// (what SAML assertions and metadata need), in a new temporary directory until `remove()`.
public struct TestSigningKeys: Sendable {
    public let directory: String
    public let rsaKeyPath: String
    public let ecKeyPath: String
    public let rsaKeyWithCertificatePath: String
    public let ecKeyWithCertificatePath: String

    public static func generate() throws -> TestSigningKeys {
        let dir = NSTemporaryDirectory() + "parley-signing-" + SecureRandom.token(byteCount: 8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try ExternalTool.run("openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.pem"], in: dir)
        try ExternalTool.run("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ec.pem"], in: dir)
        try ExternalTool.run(
            "openssl", ["req", "-x509", "-new", "-key", "rsa.pem", "-out", "rsa.crt", "-days", "2", "-subj", "/CN=parley-signing"], in: dir)
        try ExternalTool.run(
            "openssl", ["req", "-x509", "-new", "-key", "ec.pem", "-out", "ec.crt", "-days", "2", "-subj", "/CN=parley-signing-ec"], in: dir)
        for kind in ["rsa", "ec"] {
            let combined = (FileManager.default.contents(atPath: "\(dir)/\(kind).pem") ?? Data()) + (FileManager.default.contents(atPath: "\(dir)/\(kind).crt") ?? Data())
            try combined.write(to: URL(fileURLWithPath: "\(dir)/\(kind)-with-certificate.pem"))
        }
        return TestSigningKeys(
            directory: dir, rsaKeyPath: dir + "/rsa.pem", ecKeyPath: dir + "/ec.pem", rsaKeyWithCertificatePath: dir + "/rsa-with-certificate.pem",
            ecKeyWithCertificatePath: dir + "/ec-with-certificate.pem")
    }

    public func remove() { try? FileManager.default.removeItem(atPath: directory) }
}
