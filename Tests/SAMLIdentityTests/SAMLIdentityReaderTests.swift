import Foundation
import ParleyEncoding
import Testing

@testable import SAMLIdentity

/// Signed responses made at test time (`TestIdP`: openssl + xmlsec1) through
/// `SAMLIdentityReader`: what verifies gives the NameID and Issuer, and every refusal
/// names the check that failed.
@Suite struct SAMLIdentityReaderTests {
    typealias Doc = SAMLDocument

    let idp: TestIdP
    let other: TestIdP

    init() throws {
        idp = try TestIdP.rsa.get()
        other = try TestIdP.otherRSA.get()
    }

    /// A Response whose Assertion is signed (the common case: SimpleSAMLphp, ADFS, Entra ID).
    func signedAssertion(nameID: String = "alice@example.org", by signer: TestIdP? = nil, extensions: String? = nil) throws -> String {
        try (signer ?? idp).sign(Doc.response(extensions: extensions, body: Doc.assertion(nameID: nameID, signature: Doc.signatureTemplate(uri: "#_a1"))))
    }

    func read(_ document: String, trusting certificates: [String]? = nil) -> Result<SAMLSignedInIdentity, SAMLIdentityError> {
        SAMLIdentityReader.read(samlResponse: Doc.base64(document), trusting: certificates ?? [idp.certificatePEM])
    }

    func expectRefused(_ document: String, _ check: SAMLIdentityError.Check, trusting certificates: [String]? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        switch read(document, trusting: certificates) {
        case .success(let identity):
            Issue.record("accepted as \(identity.nameID); expected \(check)", sourceLocation: sourceLocation)
        case .failure(let error):
            #expect(error.check == check, sourceLocation: sourceLocation)
            #expect(!error.description.contains("alice") && !error.description.contains("mallory"), sourceLocation: sourceLocation)
        }
    }

    // MARK: accepted

    @Test func aSignedAssertionGivesItsNameIDAndIssuer() throws {
        let identity = try read(try signedAssertion()).get()
        #expect(identity == SAMLSignedInIdentity(issuer: Doc.issuer, nameID: "alice@example.org", nameIDFormat: Doc.emailFormat))
    }

    @Test func aSignedResponseGivesTheAssertionInsideIt() throws {
        let document = try idp.sign(Doc.response(signature: Doc.signatureTemplate(uri: "#_r1"), body: Doc.assertion(nameID: "bob@example.org")))
        #expect(try read(document).get().nameID == "bob@example.org")
    }

    @Test func aResponseAndAnAssertionBothSignedAreRead() throws {
        let assertionSigned = try signedAssertion()
        let both = try idp.sign(assertionSigned.replacingOccurrences(of: "</saml:Issuer>", with: "</saml:Issuer>" + Doc.signatureTemplate(uri: "#_r1"), options: [], range: assertionSigned.range(of: "</saml:Issuer>")))
        #expect(try read(both).get().nameID == "alice@example.org")
        #expect(both.components(separatedBy: "<ds:SignatureValue>").count == 3)
    }

    @Test func anECDSASignatureVerifies() throws {
        let ec = try TestIdP.ec.get()
        let document = try ec.sign(Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1", algorithm: .ecdsaSHA256))))
        #expect(try read(document, trusting: [ec.certificatePEM]).get().nameID == "alice@example.org")
    }

    @Test func anyOfSeveralTrustedCertificatesMayHaveSigned() throws {
        // Key rotation: the old and the new certificate are both listed.
        let document = try signedAssertion()
        #expect(try read(document, trusting: [other.certificatePEM, "not a certificate", idp.certificatePEM]).get().nameID == "alice@example.org")
    }

    @Test func base64WithLineBreaksIsRead() throws {
        let encoded = Doc.base64(try signedAssertion())
        var wrapped = ""
        for (index, character) in encoded.enumerated() {
            if index > 0, index % 76 == 0 { wrapped += "\r\n" }
            wrapped.append(character)
        }
        #expect(try SAMLIdentityReader.read(samlResponse: wrapped, trusting: [idp.certificatePEM]).get().nameID == "alice@example.org")
    }

    @Test func readsRunConcurrently() async throws {
        let encoded = Doc.base64(try signedAssertion())
        let certificate = idp.certificatePEM
        let names = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<32 {
                group.addTask { try? SAMLIdentityReader.read(samlResponse: encoded, trusting: [certificate]).get().nameID }
            }
            return await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(names.count == 32 && names.allSatisfy { $0 == "alice@example.org" })
    }

    // MARK: signatures that do not hold

    @Test func anUnsignedResponseIsRefused() {
        expectRefused(Doc.response(body: Doc.assertion()), .unsigned)
    }

    @Test func aSignatureByAnotherKeyIsRefused() throws {
        // The signer's own certificate rides along in KeyInfo; it is never used.
        expectRefused(try signedAssertion(by: other), .signatureInvalid)
    }

    @Test func aNameIDChangedAfterSigningIsRefused() throws {
        let document = try signedAssertion().replacingOccurrences(of: "alice@example.org", with: "mallory@example.org")
        expectRefused(document, .signatureInvalid)
    }

    @Test func aCommentInsideTheNameIDIsRefusedThoughTheSignatureHolds() throws {
        // Exclusive c14n drops comments, so the signature still verifies; a reader that
        // took the first text node would see "alice@example.org" of "alice@example.org.evil".
        let signed = try signedAssertion(nameID: "alice@example.org.evil")
        expectRefused(signed.replacingOccurrences(of: "alice@example.org.evil", with: "alice@example.org<!---->.evil"), .nameIDNotText)
    }

    @Test func anUnsignedResponseAroundASignedAssertionCannotChangeTheIssuer() throws {
        let signed = try signedAssertion()
        expectRefused(signed.replacingOccurrences(of: "<saml:Issuer>\(Doc.issuer)</saml:Issuer><samlp:Status", with: "<saml:Issuer>https://evil.example</saml:Issuer><samlp:Status"), .issuerMismatch)
        #expect(signed.contains("<saml:Issuer>\(Doc.issuer)</saml:Issuer><samlp:Status"))
    }

    @Test func aSignedResponseWithATamperedAssertionIsRefused() throws {
        let document = try idp.sign(Doc.response(signature: Doc.signatureTemplate(uri: "#_r1"), body: Doc.assertion()))
        expectRefused(document.replacingOccurrences(of: "alice@example.org", with: "mallory@example.org"), .signatureInvalid)
    }

    @Test func everySignaturePresentMustVerify() throws {
        // The assertion is signed by the trusted IdP, the Response by another key.
        let assertionSigned = try signedAssertion()
        let both = try other.sign(assertionSigned.replacingOccurrences(of: "</saml:Issuer>", with: "</saml:Issuer>" + Doc.signatureTemplate(uri: "#_r1"), options: [], range: assertionSigned.range(of: "</saml:Issuer>")))
        expectRefused(both, .signatureInvalid)
    }

    @Test func sha1IsRefused() throws {
        let document = try idp.sign(Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1", algorithm: .rsaSHA1))))
        expectRefused(document, .sha1Refused)
    }

    @Test func anEmptyReferenceURIIsRefused() throws {
        // URI="" signs the whole document: valid XML-DSig, but not a reference to the assertion.
        let document = try idp.sign(Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: ""))))
        expectRefused(document, .emptyReference)
        let responseLevel = try idp.sign(Doc.response(signature: Doc.signatureTemplate(uri: ""), body: Doc.assertion()))
        expectRefused(responseLevel, .emptyReference)
    }

    @Test func aReferenceToAnotherElementIsRefused() throws {
        // The assertion's signature covers the Response (its parent): not the element that holds it.
        let document = try idp.sign(Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_r1"))))
        expectRefused(document, .referenceElsewhere)
    }

    @Test func aSignatureCarryingAnObjectIsRefused() throws {
        let document = try idp.sign(
            Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1", object: "<ds:Object><x:Any xmlns:x=\"urn:x\"/></ds:Object>")))
        )
        expectRefused(document, .signatureMalformed)
    }

    @Test func aSignatureOutsideTheResponseAndAssertionIsRefused() throws {
        let signed = try signedAssertion()
        let misplaced = signed.replacingOccurrences(
            of: "<samlp:Status>", with: "<samlp:Extensions>\(Doc.signatureTemplate(uri: "#_r1"))</samlp:Extensions><samlp:Status>")
        expectRefused(misplaced, .signatureMisplaced)
    }

    @Test func noUsableCertificateIsReportedAsSuch() throws {
        expectRefused(try signedAssertion(), .noUsableCertificate, trusting: ["-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"])
        expectRefused(try signedAssertion(), .noUsableCertificate, trusting: [])
    }

    // MARK: signature wrapping

    @Test func anEvilAssertionBesideTheSignedOneIsRefused() throws {
        let signed = try signedAssertion()
        let evil = Doc.assertion(id: "_evil", nameID: "mallory@example.org")
        // The evil assertion first, the signed one after it.
        expectRefused(signed.replacingOccurrences(of: "</samlp:Status>", with: "</samlp:Status>" + evil), .multipleAssertions)
        // The evil assertion after the signed one.
        expectRefused(signed.replacingOccurrences(of: "</samlp:Response>", with: evil + "</samlp:Response>"), .multipleAssertions)
    }

    @Test func theSignedAssertionMovedIntoExtensionsIsRefused() throws {
        let signed = try signedAssertion()
        let signedAssertion = try #require(Doc.element("<saml:Assertion", closing: "</saml:Assertion>", in: signed))
        let evil = Doc.assertion(id: "_evil", nameID: "mallory@example.org")
        // XSW: the signed assertion hidden in Extensions (still verifiable by ID), the evil one where an SP looks.
        let wrapped = Doc.response(extensions: signedAssertion, body: evil)
        expectRefused(wrapped, .multipleAssertions)
        // The same with the evil assertion reusing the signed one's ID.
        expectRefused(Doc.response(extensions: signedAssertion, body: Doc.assertion(id: "_a1", nameID: "mallory@example.org")), .multipleAssertions)
        // Only the moved assertion, nothing beside it: not where SAML puts it.
        expectRefused(Doc.response(extensions: signedAssertion, body: ""), .assertionMisplaced)
    }

    @Test func theSignedAssertionInsideTheEvilOnesSignatureObjectIsRefused() throws {
        let signed = try signedAssertion()
        let signedAssertion = try #require(Doc.element("<saml:Assertion", closing: "</saml:Assertion>", in: signed))
        let evil = Doc.assertion(
            id: "_evil", nameID: "mallory@example.org", signature: Doc.signatureTemplate(uri: "#_a1", object: "<ds:Object>\(signedAssertion)</ds:Object>"))
        expectRefused(Doc.response(body: evil), .multipleAssertions)
    }

    @Test func aSignedResponseWrappedInsideAnEvilOneIsRefused() throws {
        let signedResponse = try idp.sign(Doc.response(signature: Doc.signatureTemplate(uri: "#_r1"), body: Doc.assertion()))
        let inner = try #require(Doc.element("<samlp:Response", closing: "</samlp:Response>", in: signedResponse))
        // The original Response (signed) moved into the evil one's Extensions, with an evil assertion beside it.
        let evil = Doc.response(id: "_evil", extensions: inner, body: Doc.assertion(id: "_e1", nameID: "mallory@example.org"))
        expectRefused(evil, .multipleAssertions)
        // Without the evil assertion, the one signed Response is inside another: refused as well.
        expectRefused(Doc.response(id: "_evil", extensions: inner, body: ""), .assertionMisplaced)
    }

    @Test func anEncryptedLookingAssertionBesideTheSignedOneIsRefused() throws {
        let signed = try signedAssertion()
        let nested = signed.replacingOccurrences(
            of: "<saml:AuthnStatement", with: "<saml:Advice>\(Doc.assertion(id: "_evil", nameID: "mallory@example.org"))</saml:Advice><saml:AuthnStatement")
        expectRefused(nested, .multipleAssertions)
        let foreign = signed.replacingOccurrences(of: "<samlp:Status>", with: "<samlp:Extensions><x:Assertion xmlns:x=\"urn:x\"/></samlp:Extensions><samlp:Status>")
        expectRefused(foreign, .multipleAssertions)
    }

    // MARK: IDs

    @Test func anIDUsedTwiceIsRefused() throws {
        // Added after signing (xmlsec1 itself refuses to sign a document with a duplicate ID).
        let signed = try signedAssertion()
        for thing in ["ID", "xml:id", "Id"].map({ "<x:Thing xmlns:x=\"urn:x\" \($0)=\"_a1\"/>" }) {
            expectRefused(signed.replacingOccurrences(of: "<samlp:Status>", with: "<samlp:Extensions>\(thing)</samlp:Extensions><samlp:Status>"), .duplicateID)
        }
        // The unsigned Response given the signed Assertion's ID.
        let sameAsResponse = signed.replacingOccurrences(of: "ID=\"_r1\"", with: "ID=\"_a1\"")
        #expect(sameAsResponse != signed)
        expectRefused(sameAsResponse, .duplicateID)
    }

    @Test func anIDThatIsNotAPlainNameIsRefused() throws {
        expectRefused(Doc.response(id: "x'y", body: Doc.assertion()), .badID)
        expectRefused(Doc.response(body: Doc.assertion(id: "1abc")), .badID)
        expectRefused(Doc.response(body: Doc.assertion().replacingOccurrences(of: " ID=\"_a1\"", with: "")), .badID)
        #expect(SAMLIdentityReader.isPlainNCName("_8f3a-b.c") && SAMLIdentityReader.isPlainNCName("id-Ab"))
        #expect(!SAMLIdentityReader.isPlainNCName("") && !SAMLIdentityReader.isPlainNCName("xpointer(id('a'))"))
        #expect(!SAMLIdentityReader.isPlainNCName(String(repeating: "a", count: 257)))
    }

    // MARK: hostile bytes

    @Test func aDocumentTypeIsRefusedBeforeItIsRead() throws {
        let signed = try signedAssertion()
        let withEntity = signed.replacingOccurrences(of: "alice@example.org", with: "&x;").replacingOccurrences(
            of: "<?xml version=\"1.0\" encoding=\"UTF-8\"?>", with: "<?xml version=\"1.0\"?><!DOCTYPE samlp:Response [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>")
        #expect(withEntity.contains("<!DOCTYPE"))
        expectRefused(withEntity, .documentType)
        let external = signed.replacingOccurrences(
            of: "<?xml version=\"1.0\" encoding=\"UTF-8\"?>", with: "<!DOCTYPE samlp:Response SYSTEM \"http://127.0.0.1:9/evil.dtd\">")
        expectRefused(external, .documentType)
    }

    @Test func theParseItselfStopsAtADocumentType() {
        // Behind the byte scan: the parser's own hook (no DTD, no entity, nothing fetched).
        for document in [
            "<!DOCTYPE r [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><r>&b;</r>",
            "<!DOCTYPE r SYSTEM \"http://127.0.0.1:9/x.dtd\"><r/>",
            "<!DOCTYPE r PUBLIC \"-//x//y\" \"file:///etc/passwd\"><r/>",
        ] {
            #expect(throws: SAMLIdentityError(.documentType)) { _ = try XMLDocument(parsing: Array(document.utf8)) }
        }
        #expect(throws: SAMLIdentityError(.notXML)) { _ = try XMLDocument(parsing: Array("<r>&undeclared;</r>".utf8)) }
        #expect(throws: SAMLIdentityError(.notXML)) { _ = try XMLDocument(parsing: Array("<r><x></r>".utf8)) }
        #expect(throws: Never.self) { _ = try XMLDocument(parsing: Array("<r a='1'>t</r>".utf8)) }
    }

    @Test func garbageIsRefused() {
        #expect(throws: SAMLIdentityError(.notBase64)) { try SAMLIdentityReader.read(samlResponse: "!!not base64**", trusting: [idp.certificatePEM]).get() }
        #expect(throws: SAMLIdentityError(.notBase64)) { try SAMLIdentityReader.read(samlResponse: "", trusting: [idp.certificatePEM]).get() }
        #expect(throws: SAMLIdentityError(.notXML)) {
            try SAMLIdentityReader.read(samlResponse: Base64.encode(Array("not xml at all".utf8)), trusting: [idp.certificatePEM]).get()
        }
        #expect(throws: SAMLIdentityError(.notXML)) {
            try SAMLIdentityReader.read(samlResponse: Base64.encode([0xFF, 0xFE, 0x3C, 0x00, 0x72, 0x00]), trusting: [idp.certificatePEM]).get()
        }
        expectRefused("<samlp:AuthnRequest xmlns:samlp=\"urn:oasis:names:tc:SAML:2.0:protocol\" ID=\"_x\"/>", .notAResponse)
        expectRefused("<Response ID=\"_x\"/>", .notAResponse)
    }

    @Test func anOversizedDocumentIsRefusedBeforeParsing() throws {
        let signed = try signedAssertion()
        let padded = signed.replacingOccurrences(of: "</samlp:Response>", with: "<!--" + String(repeating: "x", count: SAMLIdentityReader.maxDecodedBytes) + "--></samlp:Response>")
        expectRefused(padded, .tooLarge)
        #expect(throws: SAMLIdentityError(.tooLarge)) {
            try SAMLIdentityReader.read(samlResponse: String(repeating: "A", count: SAMLIdentityReader.maxDecodedBytes * 2 + 4), trusting: []).get()
        }
        // Just under the bound, the same document is read.
        let fits = signed.replacingOccurrences(of: "</samlp:Response>", with: "<!--" + String(repeating: "x", count: SAMLIdentityReader.maxDecodedBytes - signed.utf8.count - 8) + "--></samlp:Response>")
        #expect(try read(fits).get().nameID == "alice@example.org")
    }

    @Test func anEncryptedAssertionIsRefusedAsSuch() throws {
        let encrypted = """
            <saml:EncryptedAssertion><xenc:EncryptedData xmlns:xenc="http://www.w3.org/2001/04/xmlenc#" Type="http://www.w3.org/2001/04/xmlenc#Element">\
            <xenc:EncryptionMethod Algorithm="http://www.w3.org/2009/xmlenc11#aes256-gcm"/><xenc:CipherData><xenc:CipherValue>AAAA</xenc:CipherValue></xenc:CipherData>\
            </xenc:EncryptedData></saml:EncryptedAssertion>
            """
        expectRefused(Doc.response(body: encrypted), .encryptedAssertion)
        // Beside a signed plain assertion as well, and an encrypted NameID in the signed one.
        expectRefused(try signedAssertion().replacingOccurrences(of: "</samlp:Response>", with: encrypted + "</samlp:Response>"), .encryptedAssertion)
        let encryptedID = try idp.sign(
            Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1"), subjectExtra: "<saml:EncryptedID><x:Data xmlns:x=\"urn:x\"/></saml:EncryptedID>")))
        expectRefused(encryptedID, .encryptedAssertion)
    }

    // MARK: what the assertion must hold

    @Test func aFailedStatusGivesNoIdentity() throws {
        let failed = try idp.sign(
            Doc.response(status: "urn:oasis:names:tc:SAML:2.0:status:Responder", body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1"))))
        expectRefused(failed, .statusNotSuccess)
        expectRefused(Doc.response(status: "urn:oasis:names:tc:SAML:2.0:status:Requester", body: ""), .statusNotSuccess)
        expectRefused(Doc.response(body: ""), .noAssertion)
    }

    @Test func theNameIDMustBeOneAndPlainText() throws {
        let twoNameIDs = try idp.sign(
            Doc.response(body: Doc.assertion(signature: Doc.signatureTemplate(uri: "#_a1"), subjectExtra: "<saml:NameID>mallory@example.org</saml:NameID>")))
        expectRefused(twoNameIDs, .missingNameID)
        let empty = try signedAssertion(nameID: "  ")
        expectRefused(empty, .badText)
        let control = try signedAssertion(nameID: "alice&#9;@example.org")
        expectRefused(control, .badText)
        let long = try signedAssertion(nameID: String(repeating: "a", count: SAMLIdentityReader.maxTextBytes + 1))
        expectRefused(long, .badText)
        let spaced = try signedAssertion(nameID: "\n  alice@example.org \n")
        #expect(try read(spaced).get().nameID == "alice@example.org")
    }

    @Test func errorsNameTheCheckNotTheDocument() {
        let error = SAMLIdentityError(.signatureInvalid)
        #expect(error.check.description == "signature_invalid")
        #expect(error.description == "a signature does not verify with the identity provider's certificates")
    }
}
