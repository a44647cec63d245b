import Foundation
import ParleyEncoding

/// Signed SAML responses made at test time: keys and certificates from `openssl`, XML
/// signatures from Debian's `xmlsec1` (the same library pysaml2 shells out to). Key files
/// exist only in a temporary folder for the length of one command; nothing is committed.
struct TestIdP: Sendable {
    enum KeyKind: Sendable { case rsa, ec }

    let keyPEM: String
    let certificatePEM: String

    /// Two RSA identity providers and an EC one, made once for every test.
    static let rsa = Result { try TestIdP(.rsa, name: "rsa") }
    static let otherRSA = Result { try TestIdP(.rsa, name: "other") }
    static let ec = Result { try TestIdP(.ec, name: "ec") }

    init(_ kind: KeyKind, name: String) throws {
        let keyArguments =
            switch kind {
            case .rsa: ["-newkey", "rsa:2048"]
            case .ec: ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
            }
        (keyPEM, certificatePEM) = try withTemporaryFolder { folder in
            let key = folder.appendingPathComponent("key.pem").path
            let certificate = folder.appendingPathComponent("cert.pem").path
            try run(
                "/usr/bin/openssl",
                ["req", "-x509"] + keyArguments + ["-nodes", "-sha256", "-days", "2", "-subj", "/CN=parley-test-\(name)", "-keyout", key, "-out", certificate]
            )
            return (try String(contentsOfFile: key, encoding: .utf8), try String(contentsOfFile: certificate, encoding: .utf8))
        }
    }

    /// `document` with its first `ds:Signature` template (document order) signed by
    /// this IdP; the certificate goes into an `X509Data` template if there is one.
    func sign(_ document: String) throws -> String {
        try withTemporaryFolder { folder in
            let key = folder.appendingPathComponent("key.pem")
            let certificate = folder.appendingPathComponent("cert.pem")
            let input = folder.appendingPathComponent("in.xml")
            let output = folder.appendingPathComponent("out.xml")
            try Data(keyPEM.utf8).write(to: key)
            try Data(certificatePEM.utf8).write(to: certificate)
            try Data(document.utf8).write(to: input)
            try run(
                "/usr/bin/xmlsec1",
                [
                    "--sign", "--privkey-pem", "\(key.path),\(certificate.path)",
                    "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:assertion:Assertion",
                    "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:protocol:Response",
                    "--output", output.path, input.path,
                ]
            )
            return try String(contentsOf: output, encoding: .utf8)
        }
    }
}

struct CommandFailed: Error, CustomStringConvertible {
    let description: String
}

func run(_ executable: String, _ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    let message = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw CommandFailed(description: "\(executable) \(arguments.first ?? ""): exit \(process.terminationStatus): \(String(decoding: message, as: UTF8.self))")
    }
}

func withTemporaryFolder<T>(_ body: (URL) throws -> T) throws -> T {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("parley-saml-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(at: folder) }
    return try body(folder)
}

/// SAML documents as an identity provider writes them, with signature templates where asked.
enum SAMLDocument {
    static let issuer = "https://idp.example.org/metadata"
    static let emailFormat = "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress"

    enum Algorithm {
        case rsaSHA256, ecdsaSHA256, rsaSHA1

        var signature: String {
            switch self {
            case .rsaSHA256: "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"
            case .ecdsaSHA256: "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256"
            case .rsaSHA1: "http://www.w3.org/2000/09/xmldsig#rsa-sha1"
            }
        }
        var digest: String {
            switch self {
            case .rsaSHA256, .ecdsaSHA256: "http://www.w3.org/2001/04/xmlenc#sha256"
            case .rsaSHA1: "http://www.w3.org/2000/09/xmldsig#sha1"
            }
        }
    }

    /// An unsigned `ds:Signature` template over `uri`.
    static func signatureTemplate(uri: String, algorithm: Algorithm = .rsaSHA256, object: String = "") -> String {
        """
        <ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:SignedInfo>\
        <ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>\
        <ds:SignatureMethod Algorithm="\(algorithm.signature)"/>\
        <ds:Reference URI="\(uri)"><ds:Transforms>\
        <ds:Transform Algorithm="http://www.w3.org/2000/09/xmldsig#enveloped-signature"/>\
        <ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>\
        </ds:Transforms><ds:DigestMethod Algorithm="\(algorithm.digest)"/><ds:DigestValue></ds:DigestValue></ds:Reference>\
        </ds:SignedInfo><ds:SignatureValue></ds:SignatureValue><ds:KeyInfo><ds:X509Data/></ds:KeyInfo>\(object)</ds:Signature>
        """
    }

    /// A `saml:Assertion` (namespace declared on itself, so it can be moved).
    static func assertion(
        id: String = "_a1", nameID: String = "alice@example.org", issuer: String = issuer, signature: String = "", subjectExtra: String = ""
    ) -> String {
        """
        <saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="\(id)" Version="2.0" IssueInstant="2026-11-26T10:00:00Z">\
        <saml:Issuer>\(issuer)</saml:Issuer>\(signature)\
        <saml:Subject><saml:NameID Format="\(emailFormat)">\(nameID)</saml:NameID>\(subjectExtra)\
        <saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">\
        <saml:SubjectConfirmationData NotOnOrAfter="2026-11-26T10:05:00Z" Recipient="https://parley.example/web/d/saml/acs" InResponseTo="_req1"/>\
        </saml:SubjectConfirmation></saml:Subject>\
        <saml:Conditions NotBefore="2026-11-26T09:59:00Z" NotOnOrAfter="2026-11-26T10:05:00Z">\
        <saml:AudienceRestriction><saml:Audience>https://parley.example/web/d/metadata</saml:Audience></saml:AudienceRestriction></saml:Conditions>\
        <saml:AuthnStatement AuthnInstant="2026-11-26T10:00:00Z"><saml:AuthnContext>\
        <saml:AuthnContextClassRef>urn:oasis:names:tc:SAML:2.0:ac:classes:Password</saml:AuthnContextClassRef>\
        </saml:AuthnContext></saml:AuthnStatement></saml:Assertion>
        """
    }

    /// A `samlp:Response` around `body` (assertions and whatever else), Success by default.
    static func response(
        id: String = "_r1", issuer: String? = issuer, signature: String = "", extensions: String? = nil,
        status: String = "urn:oasis:names:tc:SAML:2.0:status:Success", body: String
    ) -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" \
        ID="\(id)" Version="2.0" IssueInstant="2026-11-26T10:00:00Z" Destination="https://parley.example/web/d/saml/acs" InResponseTo="_req1">\
        \(issuer.map { "<saml:Issuer>\($0)</saml:Issuer>" } ?? "")\(signature)\
        \(extensions.map { "<samlp:Extensions>\($0)</samlp:Extensions>" } ?? "")\
        <samlp:Status><samlp:StatusCode Value="\(status)"/></samlp:Status>\(body)</samlp:Response>
        """
    }

    /// The element `<prefix:name …>…</prefix:name>` that starts with `start` (the first
    /// such), cut out of `document` as it was written.
    static func element(_ start: String, closing: String, in document: String) -> String? {
        guard let from = document.range(of: start), let to = document.range(of: closing, range: from.upperBound..<document.endIndex) else { return nil }
        return String(document[from.lowerBound..<to.upperBound])
    }

    static func base64(_ document: String) -> String { Base64.encode(Array(document.utf8)) }
}
