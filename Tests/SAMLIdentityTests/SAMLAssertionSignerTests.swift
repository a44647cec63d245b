import Foundation
import ParleyEncoding
import SAMLIdentity
import Testing

/// The assertions Parley signs for `saml2_bearer` grants, RSA and EC alike, verify with the
/// certificate beside the key through the reader that checks identity providers' responses; a
/// byte changed after signing, or another certificate, does not.
@Suite struct SAMLAssertionSignerTests {
    static func response(_ assertion: [UInt8]) -> String {
        var xml = String(decoding: assertion, as: UTF8.self)
        if xml.hasPrefix("<?xml"), let end = xml.range(of: "?>") { xml = String(xml[end.upperBound...]) }
        let wrapped =
            #"<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ID="_w" Version="2.0" IssueInstant="2026-01-01T00:00:00Z"><samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>"#
            + xml + "</samlp:Response>"
        return Base64.encode(Array(wrapped.utf8))
    }

    @Test func theSignedAssertionVerifiesWithTheCertificateBesideTheKey() throws {
        let fields = SAMLAssertionSigner.Fields(
            issuer: "https://parley.example", nameID: "alice@example.com & <co>",
            nameIDFormat: "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress", audience: "https://as.example",
            recipient: "https://as.example/token", issuedAt: Int64(Date().timeIntervalSince1970))
        let rsa = try TestIdP.rsa.get(), ec = try TestIdP.ec.get()
        for (idp, other, algorithm) in [(rsa, ec, SAMLAssertionSigner.Algorithm.rsaSHA256), (ec, rsa, .ecdsaSHA256)] {
            let signed = try SAMLAssertionSigner.sign(fields, privateKeyPEM: Array(idp.keyPEM.utf8), algorithm: algorithm)
            let verified = try SAMLIdentityReader.read(samlResponse: Self.response(signed), trusting: [idp.certificatePEM]).get()
            #expect(verified.nameID == "alice@example.com & <co>" && verified.issuer == "https://parley.example")
            #expect(verified.nameIDFormat == "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress")
            let text = String(decoding: signed, as: UTF8.self)
            #expect(text.contains("<saml:Audience>https://as.example</saml:Audience>") && text.contains(#"Recipient="https://as.example/token""#))
            let tampered = Array(text.replacingOccurrences(of: "alice@example.com", with: "admin@example.com").utf8)
            #expect(throws: SAMLIdentityError.self) {
                try SAMLIdentityReader.read(samlResponse: Self.response(tampered), trusting: [idp.certificatePEM]).get()
            }
            #expect(throws: SAMLIdentityError.self) {
                try SAMLIdentityReader.read(samlResponse: Self.response(signed), trusting: [other.certificatePEM]).get()
            }
        }
        #expect(throws: SAMLAssertionSigner.Failure.self) {
            try SAMLAssertionSigner.sign(fields, privateKeyPEM: Array("not a key".utf8), algorithm: .rsaSHA256)
        }
    }

    @Test func timesAreXMLDateTimesInUTC() {
        for (seconds, text) in [
            (Int64(0), "1970-01-01T00:00:00Z"), (951_782_400, "2000-02-29T00:00:00Z"), (1_795_000_000, "2026-11-18T11:06:40Z"),
            (4_107_542_399, "2100-02-28T23:59:59Z"), (-5, "1970-01-01T00:00:00Z"),
        ] {
            #expect(SAMLAssertionSigner.timestamp(seconds) == text)
        }
    }
}
