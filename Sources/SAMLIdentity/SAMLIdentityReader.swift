import ParleyEncoding

/// Who signed in, as the identity provider's verified signature says.
public struct SAMLSignedInIdentity: Sendable, Hashable {
    /// The `Issuer` of the assertion (the identity provider's entity ID).
    public let issuer: String
    /// The assertion's `Subject/NameID`.
    public let nameID: String
    /// Its `Format` attribute, when present.
    public let nameIDFormat: String?

    public init(issuer: String, nameID: String, nameIDFormat: String?) {
        self.issuer = issuer
        self.nameID = nameID
        self.nameIDFormat = nameIDFormat
    }
}

/// Reads who signed in from the `SAMLResponse` an identity provider posts to a service
/// provider's ACS, trusting it only when its XML signature verifies against one of the
/// destination's `saml2.idpCertificates`. The service provider still validates the
/// response itself (audience, times, `InResponseTo`, replay); this only says whose it is.
///
/// Every byte is hostile. In order: the size is bounded (`maxDecodedBytes`) before any
/// parse; a `<!DOCTYPE` is refused before it is read (no DTD, no entity, nothing fetched);
/// the root must be a `samlp:Response` with status Success holding exactly one element
/// named `Assertion` anywhere in the document, and that one directly inside it; no
/// `EncryptedAssertion`/`EncryptedID`; the `ID`s of the `Response` and the `Assertion`
/// are plain NCNames, each used once in the whole document, and are the only IDs
/// registered; every `ds:Signature` is a direct child of the `Response` or the
/// `Assertion` (at most one each) and refers, with one `Reference`, to exactly the
/// element that holds it; only RSA-SHA256 or ECDSA-SHA256 over exclusive c14n with
/// enveloped-signature and SHA-256 digests; every signature present must verify with a
/// trusted key (the document's `KeyInfo` is never used), and at least one must be there.
/// The identity is then read from that one assertion, which is the signed element or
/// lies inside it. Synchronous CPU work bounded by the size: a few milliseconds at most.
public enum SAMLIdentityReader {
    /// The largest decoded `SAMLResponse` read.
    public static let maxDecodedBytes = 256 * 1024
    /// The longest `NameID`, `Format` or `Issuer`, in UTF-8 bytes.
    public static let maxTextBytes = 1024

    public static func read(samlResponse base64: String, trusting certificates: [String]) -> Result<SAMLSignedInIdentity, SAMLIdentityError> {
        do {
            return .success(try identity(base64, certificates))
        } catch {
            return .failure(error)
        }
    }

    static let protocolNS = "urn:oasis:names:tc:SAML:2.0:protocol"
    static let assertionNS = "urn:oasis:names:tc:SAML:2.0:assertion"
    static let dsigNS = "http://www.w3.org/2000/09/xmldsig#"
    static let xmlNS = "http://www.w3.org/XML/1998/namespace"
    static let success = "urn:oasis:names:tc:SAML:2.0:status:Success"

    private static func identity(_ base64: String, _ certificates: [String]) throws(SAMLIdentityError) -> SAMLSignedInIdentity {
        let bytes = try decode(base64)
        guard XMLSecurity.isReady else { throw SAMLIdentityError(.libraryUnavailable) }
        let document = try XMLDocument(parsing: bytes)
        return try identity(in: document, certificates)
    }

    /// Borrowed: the document outlives every node pointer read from it here.
    private static func identity(in document: borrowing XMLDocument, _ certificates: [String]) throws(SAMLIdentityError) -> SAMLSignedInIdentity {
        guard let response = document.root, response.isElement("Response", in: protocolNS) else { throw SAMLIdentityError(.notAResponse) }

        // One pass over the whole document: assertions wherever they hide, encrypted
        // parts, signatures, and every value an ID could be resolved from.
        var assertions: [XMLNode] = []
        var encrypted = false
        var signatures: [XMLNode] = []
        var idUses: [String: Int] = [:]
        response.forEachElement { element in
            switch element.localName {
            case "Assertion": assertions.append(element)
            case "EncryptedAssertion", "EncryptedID": encrypted = true
            case "Signature" where element.namespaceURI == dsigNS: signatures.append(element)
            default: break
            }
            element.forEachAttribute { name, namespace, attribute in
                let isID = namespace == nil ? ["ID", "Id", "id"].contains(name) : namespace == xmlNS && name == "id"
                if isID { idUses[attribute.value, default: 0] += 1 }
            }
        }
        if encrypted { throw SAMLIdentityError(.encryptedAssertion) }
        guard statusIsSuccess(response) else { throw SAMLIdentityError(.statusNotSuccess) }
        guard let assertion = assertions.first else { throw SAMLIdentityError(.noAssertion) }
        guard assertions.count == 1 else { throw SAMLIdentityError(.multipleAssertions) }
        guard assertion.isElement("Assertion", in: assertionNS), assertion.parentElement == response else {
            throw SAMLIdentityError(.assertionMisplaced)
        }

        // IDs: plain, used once each, and the only ones a Reference can resolve.
        var ids: [XMLNode: String] = [:]
        for element in [response, assertion] {
            guard let attribute = element.attributeNode("ID") else { throw SAMLIdentityError(.badID) }
            let value = attribute.value
            guard isPlainNCName(value) else { throw SAMLIdentityError(.badID) }
            guard idUses[value] == 1, document.registerID(value, attribute: attribute) else { throw SAMLIdentityError(.duplicateID) }
            ids[element] = value
        }

        // Signatures: only where SAML puts them, each over the element that holds it.
        guard !signatures.isEmpty else { throw SAMLIdentityError(.unsigned) }
        var signed: [(signature: XMLNode, id: String)] = []
        for signature in signatures {
            guard let holder = signature.parentElement, let id = ids[holder], !signed.contains(where: { $0.id == id }) else {
                throw SAMLIdentityError(.signatureMisplaced)
            }
            try checkShape(of: signature, refersTo: id)
            signed.append((signature, id))
        }
        for (signature, id) in signed {
            try verify(signature, refersTo: id, certificates)
        }

        // The identity, from the one assertion: signed itself, or inside the signed Response.
        let issuer = try singleText(in: assertion, named: "Issuer", missing: .missingIssuer)
        if let responseIssuer = response.childElements.first(where: { $0.isElement("Issuer", in: assertionNS) }) {
            guard responseIssuer.textOnly.map(trimmed) == issuer else { throw SAMLIdentityError(.issuerMismatch) }
        }
        let subjects = assertion.childElements.filter { $0.isElement("Subject", in: assertionNS) }
        guard subjects.count == 1, let subject = subjects.first else { throw SAMLIdentityError(.missingNameID) }
        let nameIDs = subject.childElements.filter { $0.isElement("NameID", in: assertionNS) }
        guard nameIDs.count == 1, let nameIDElement = nameIDs.first else { throw SAMLIdentityError(.missingNameID) }
        guard let rawNameID = nameIDElement.textOnly else { throw SAMLIdentityError(.nameIDNotText) }
        let nameID = try checkedText(trimmed(rawNameID))
        let format = try nameIDElement.attribute("Format").map { (raw: String) throws(SAMLIdentityError) -> String in try checkedText(trimmed(raw)) }
        return SAMLSignedInIdentity(issuer: issuer, nameID: nameID, nameIDFormat: format)
    }

    // MARK: the checks

    /// The form value, decoded: ASCII whitespace (line breaks some IdPs add) ignored.
    private static func decode(_ base64: String) throws(SAMLIdentityError) -> [UInt8] {
        // Base64 is 4/3 of its bytes; twice the limit leaves room for line breaks.
        guard base64.utf8.count <= maxDecodedBytes * 2 else { throw SAMLIdentityError(.tooLarge) }
        let compact = String(decoding: base64.utf8.filter { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }, as: UTF8.self)
        guard !compact.isEmpty, let bytes = Base64.decode(compact) else { throw SAMLIdentityError(.notBase64) }
        guard bytes.count <= maxDecodedBytes else { throw SAMLIdentityError(.tooLarge) }
        // UTF-8 only (UTF-16 would hide a `<!DOCTYPE` from the scan below; the parse
        // refuses one anyway).
        guard !bytes.contains(0) else { throw SAMLIdentityError(.notXML) }
        if bytes.firstRange(of: Array("<!DOCTYPE".utf8)) != nil { throw SAMLIdentityError(.documentType) }
        return bytes
    }

    private static func statusIsSuccess(_ response: XMLNode) -> Bool {
        let statuses = response.childElements.filter { $0.isElement("Status", in: protocolNS) }
        guard statuses.count == 1, let status = statuses.first else { return false }
        let codes = status.childElements.filter { $0.isElement("StatusCode", in: protocolNS) }
        guard codes.count == 1, let code = codes.first else { return false }
        return code.attribute("Value") == success
    }

    /// `[A-Za-z_][A-Za-z0-9._-]*`, at most 256 bytes: what IdPs write (`_` + hex,
    /// `id-` + letters). Nothing that could read as an XPointer.
    static func isPlainNCName(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard let first = bytes.first, bytes.count <= 256 else { return false }
        func letter(_ b: UInt8) -> Bool { (b | 0x20) >= UInt8(ascii: "a") && (b | 0x20) <= UInt8(ascii: "z") }
        guard letter(first) || first == UInt8(ascii: "_") else { return false }
        return bytes.allSatisfy { b in
            letter(b) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
        }
    }

    static let excC14N = "http://www.w3.org/2001/10/xml-exc-c14n#"
    static let enveloped = "http://www.w3.org/2000/09/xmldsig#enveloped-signature"
    static let signatureMethods: Set<String> = [
        "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256", "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256",
    ]
    static let sha256 = "http://www.w3.org/2001/04/xmlenc#sha256"

    /// The signature's shape before any cryptography: `SignedInfo` (c14n, method, one
    /// `Reference` to `#id` with enveloped-signature then exclusive c14n, SHA-256),
    /// `SignatureValue`, at most one `KeyInfo`, and nothing else (no `Object`).
    private static func checkShape(of signature: XMLNode, refersTo id: String) throws(SAMLIdentityError) {
        let malformed = SAMLIdentityError(.signatureMalformed)
        let parts = signature.childElements
        guard parts.allSatisfy({ $0.namespaceURI == dsigNS }) else { throw malformed }
        let names = parts.map(\.localName)
        guard names == ["SignedInfo", "SignatureValue"] || names == ["SignedInfo", "SignatureValue", "KeyInfo"] else { throw malformed }
        let info = parts[0].childElements
        guard info.allSatisfy({ $0.namespaceURI == dsigNS }), info.map(\.localName) == ["CanonicalizationMethod", "SignatureMethod", "Reference"] else {
            throw malformed
        }
        let reference = info[2]
        // The Reference before the algorithms: where it points is the first question.
        guard let uri = reference.attribute("URI"), !uri.isEmpty else { throw SAMLIdentityError(.emptyReference) }
        guard uri == "#" + id else { throw SAMLIdentityError(.referenceElsewhere) }
        try checkAlgorithm(info[0].attribute("Algorithm"), allowed: [excC14N])
        try checkAlgorithm(info[1].attribute("Algorithm"), allowed: signatureMethods)
        let steps = reference.childElements
        guard steps.allSatisfy({ $0.namespaceURI == dsigNS }), steps.map(\.localName) == ["Transforms", "DigestMethod", "DigestValue"] else {
            throw malformed
        }
        let transforms = steps[0].childElements
        guard transforms.allSatisfy({ $0.isElement("Transform", in: dsigNS) }), transforms.count == 2 else { throw SAMLIdentityError(.algorithmRefused) }
        try checkAlgorithm(transforms[0].attribute("Algorithm"), allowed: [enveloped])
        try checkAlgorithm(transforms[1].attribute("Algorithm"), allowed: [excC14N])
        // Only exclusive c14n's InclusiveNamespaces may sit inside a transform.
        guard transforms[0].childElements.isEmpty, transforms[1].childElements.allSatisfy({ $0.localName == "InclusiveNamespaces" }) else {
            throw SAMLIdentityError(.algorithmRefused)
        }
        try checkAlgorithm(steps[1].attribute("Algorithm"), allowed: [sha256])
    }

    private static func checkAlgorithm(_ algorithm: String?, allowed: Set<String>) throws(SAMLIdentityError) {
        guard let algorithm, allowed.contains(algorithm) else {
            if let algorithm, algorithm.hasSuffix("sha1") { throw SAMLIdentityError(.sha1Refused) }
            throw SAMLIdentityError(.algorithmRefused)
        }
    }

    /// Verifies with each trusted certificate in turn until one key verifies it.
    private static func verify(_ signature: XMLNode, refersTo id: String, _ certificates: [String]) throws(SAMLIdentityError) {
        var usable = 0
        for pem in certificates {
            guard let key = TrustedKey(pem: pem) else { continue }
            usable += 1
            guard let context = SignatureContext(adopting: key) else { continue }
            switch context.verify(signature, expectedURI: "#" + id) {
            case .verified: return
            case .otherThanAsked: throw SAMLIdentityError(.referenceElsewhere)
            case .notVerified: continue
            }
        }
        throw SAMLIdentityError(usable == 0 ? .noUsableCertificate : .signatureInvalid)
    }

    private static func singleText(in parent: XMLNode, named name: String, missing: SAMLIdentityError.Check) throws(SAMLIdentityError) -> String {
        let elements = parent.childElements.filter { $0.isElement(name, in: assertionNS) }
        guard elements.count == 1, let element = elements.first else { throw SAMLIdentityError(missing) }
        guard let text = element.textOnly else { throw SAMLIdentityError(.nameIDNotText) }
        return try checkedText(trimmed(text))
    }

    private static func trimmed(_ text: String) -> String {
        let bytes = Array(text.utf8)
        let space: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
        guard let start = bytes.firstIndex(where: { !space($0) }), let end = bytes.lastIndex(where: { !space($0) }) else { return "" }
        return String(decoding: bytes[start...end], as: UTF8.self)
    }

    private static func checkedText(_ text: String) throws(SAMLIdentityError) -> String {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxTextBytes, !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw SAMLIdentityError(.badText)
        }
        return text
    }
}
