import Foundation
import ParleyEncoding
import SAMLIdentity
import Testing

/// A response SimpleSAMLphp 1.19 (Tests/Fixtures/saml) signed for `alice`, captured once
/// with curl through the fixture, with its IdP's certificate (the key was thrown away):
/// Response and Assertion both signed, RSA-SHA256, X509Data in KeyInfo, attributes.
@Suite struct CapturedResponseTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/saml/captured")

    let response: String
    let certificate: String

    init() throws {
        response = try String(contentsOf: Self.folder.appendingPathComponent("simplesamlphp-response.b64"), encoding: .utf8)
        certificate = try String(contentsOf: Self.folder.appendingPathComponent("simplesamlphp-idp.pem"), encoding: .utf8)
    }

    @Test func simpleSAMLphpsResponseNamesAlice() throws {
        let identity = try SAMLIdentityReader.read(samlResponse: response, trusting: [certificate]).get()
        #expect(identity.nameID == "alice")
        #expect(identity.nameIDFormat == "urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified")
        #expect(identity.issuer == "http://127.0.0.1:38921/saml2/idp/metadata.php")
    }

    /// The fuzz target's seeds (Tests/Fuzz/corpus/saml-response) that this IdP signed (both
    /// signed, the Assertion only, the Response only) verify, so fuzzing starts from "yes".
    @Test(arguments: ["both-signed", "assertion-signed", "response-signed"])
    func theFuzzSeedsItSignedVerify(_ seed: String) throws {
        let file = Self.folder.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/corpus/saml-response/simplesamlphp-\(seed).xml")
        let bytes = try Data(contentsOf: file)
        #expect(try SAMLIdentityReader.read(samlResponse: Base64.encode(Array(bytes)), trusting: [certificate]).get().nameID == "alice")
    }

    @Test func itIsRefusedChangedOrUnderAnotherCertificate() throws {
        let xml = String(decoding: try #require(Base64.decode(response)), as: UTF8.self)
        let bob = xml.replacingOccurrences(of: ">alice</saml:NameID>", with: ">bob</saml:NameID>")
        #expect(bob != xml)
        #expect(throws: SAMLIdentityError(.signatureInvalid)) {
            try SAMLIdentityReader.read(samlResponse: Base64.encode(Array(bob.utf8)), trusting: [certificate]).get()
        }
        let other = try TestIdP.otherRSA.get().certificatePEM
        #expect(throws: SAMLIdentityError(.signatureInvalid)) { try SAMLIdentityReader.read(samlResponse: response, trusting: [other]).get() }
    }
}
