import AuthFlows
import Foundation
import Testing

/// `saml2.idpCertificates`: each entry one PEM X.509 certificate with an RSA or EC key,
/// checked when the destinations file is read, every problem at once. Certificates are
/// made with openssl in a temporary folder.
@Suite struct IdPCertificatesTests {
    static func certificate(_ keyArguments: [String]) throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-idp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments =
            ["req", "-x509"] + keyArguments + [
                "-nodes", "-days", "2", "-subj", "/CN=idp", "-keyout", folder.appendingPathComponent("k.pem").path, "-out",
                folder.appendingPathComponent("c.pem").path,
            ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        return try String(contentsOf: folder.appendingPathComponent("c.pem"), encoding: .utf8)
    }

    /// The YAML block scalar of one PEM, indented for a list item.
    static func item(_ pem: String) -> String {
        "        - |\n" + pem.split(separator: "\n").map { "          \($0)\n" }.joined()
    }

    @Test func rsaAndECCertificatesAreTakenAsWritten() throws {
        let rsa = try Self.certificate(["-newkey", "rsa:2048"])
        let ec = try Self.certificate(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        let text = "destinations:\n  - name: s\n    url: https://sp.example\n    saml2:\n      idpCertificates:\n" + Self.item(rsa) + Self.item(ec)
        let destination = try #require(try DestinationsDocument.read(text).first)
        #expect(destination.saml2?.idpCertificates == [rsa, ec])
        // Without the list, SAML sign-ins yield no identity.
        #expect(try DestinationsDocument.read("destinations: [{ name: s, url: \"https://sp.example\", saml2: {} }]")[0].saml2?.idpCertificates == [])
    }

    @Test func everyBadCertificateIsReportedAtOnce() throws {
        let rsa = try Self.certificate(["-newkey", "rsa:2048"])
        let ed25519 = try Self.certificate(["-newkey", "ed25519"])
        let truncated = String(rsa.prefix(rsa.count / 2)) + "\n-----END CERTIFICATE-----\n"
        let text = """
            destinations:
              - name: s
                url: https://sp.example
                saml2:
                  idpCertificates:

            """ + [rsa, "not a certificate", ed25519, rsa + rsa, truncated, ""].map(Self.item).joined()
            + "  - { name: t, url: \"https://t.example\", saml2: { idpCertificates: [\"\(String(repeating: "A", count: 70_000))\"] } }\n"
        #expect {
            try DestinationsDocument.read(text)
        } throws: { error in
            let problems = (error as? DestinationSpec.Invalid)?.problems ?? []
            return problems == [
                "destination 's': saml2.idpCertificates[1] is not a PEM X.509 certificate",
                "destination 's': saml2.idpCertificates[2] has a key that is neither RSA nor EC",
                "destination 's': saml2.idpCertificates[3] holds more than one certificate (list each on its own)",
                "destination 's': saml2.idpCertificates[4] is not a PEM X.509 certificate",
                "destination 's': saml2.idpCertificates[5] is not a PEM X.509 certificate",
                "destination 't': saml2.idpCertificates[0] is not a PEM X.509 certificate",
            ]
        }
    }
}
