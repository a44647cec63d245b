import ParleyEncoding
import Foundation
import ParleyCrypto

/// A throw-away PKI made with the `openssl` CLI: a CA, a server certificate for
/// `localhost` and `127.0.0.1`, and a client certificate with its PKCS#12 bundle.
/// Keys are P-256, valid for two days, and live in `directory` until `remove()`.
public struct TestCertificates: Sendable {
    public let directory: String
    public let caCertificatePath: String
    public let serverCertificatePath: String
    public let serverKeyPath: String
    public let clientCertificatePath: String
    public let clientKeyPath: String
    public let clientPKCS12Path: String
    /// Random per run; never logged.
    public let clientPKCS12Password: String
    /// Subject of the client certificate, e.g. for asserting what a TLS frontend saw.
    public let clientCommonName: String

    /// The CA certificate (PEM), to trust the server.
    public var caPEM: [UInt8] { Self.read(caCertificatePath) }
    /// The client PKCS#12 bundle (key, certificate, CA), encrypted with `clientPKCS12Password`.
    public var clientPKCS12: [UInt8] { Self.read(clientPKCS12Path) }

    /// Generates everything in a new temporary directory (or `directory`, created if needed).
    public static func generate(in directory: String? = nil, clientCommonName: String = "parley-test-client") throws
        -> TestCertificates
    {
        let dir = directory ?? NSTemporaryDirectory() + "parley-pki-" + SecureRandom.token(byteCount: 8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let password = SecureRandom.token(byteCount: 18)

        func write(_ name: String, _ text: String) throws {
            try text.write(toFile: dir + "/" + name, atomically: true, encoding: .utf8)
        }
        func serial() -> String { "0x" + Hex.encode(SecureRandom.bytes(12)) }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

        try write(
            "req.cnf",
            """
            [req]
            distinguished_name = dn
            prompt = no
            [dn]
            CN = unused
            [v3_ca]
            basicConstraints = critical, CA:TRUE
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash

            """)
        try write(
            "server.ext",
            """
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = serverAuth
            subjectAltName = DNS:localhost, IP:127.0.0.1
            authorityKeyIdentifier = keyid

            """)
        try write(
            "client.ext",
            """
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = clientAuth
            authorityKeyIdentifier = keyid

            """)

        try ExternalTool.run(
            "openssl",
            ["req", "-x509", "-new"] + ec + [
                "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=Parley Test CA",
                "-config", "req.cnf", "-extensions", "v3_ca", "-set_serial", serial(),
            ], in: dir)
        for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=\(clientCommonName)")] {
            try ExternalTool.run(
                "openssl",
                ["req", "-new"] + ec + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", subject, "-config", "req.cnf"],
                in: dir)
            try ExternalTool.run(
                "openssl",
                [
                    "x509", "-req", "-in", "\(name).csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", serial(),
                    "-days", "2", "-out", "\(name).crt", "-extfile", "\(name).ext",
                ], in: dir)
        }
        try ExternalTool.run(
            "openssl",
            [
                "pkcs12", "-export", "-inkey", "client.key", "-in", "client.crt", "-certfile", "ca.crt",
                "-name", clientCommonName, "-out", "client.p12", "-passout", "env:PARLEY_TEST_P12_PASSWORD",
            ], in: dir, environment: ["PARLEY_TEST_P12_PASSWORD": password])

        return TestCertificates(
            directory: dir,
            caCertificatePath: dir + "/ca.crt",
            serverCertificatePath: dir + "/server.crt",
            serverKeyPath: dir + "/server.key",
            clientCertificatePath: dir + "/client.crt",
            clientKeyPath: dir + "/client.key",
            clientPKCS12Path: dir + "/client.p12",
            clientPKCS12Password: password,
            clientCommonName: clientCommonName
        )
    }

    /// Deletes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func read(_ path: String) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return [UInt8](data)
    }
}
