import Foundation
import ParleyCrypto
import ParleyEncoding

/// Just enough XML for the SAML messages the simulator writes itself: finds elements by their
/// qualified name and reads their attributes and text. Never a general parser; anything it does not
/// understand is "not found", so hostile input only ever gets a refusal.
enum MiniXML {
    struct Element {
        let attributes: [String: String]
        /// The text between the start and end tag (empty for `<x/>`).
        let content: Substring
        /// The element from `<` to the end of its end tag, byte for byte.
        let whole: Substring
    }

    static func escape(_ text: String) -> String { SimHTTP.htmlEscape(text) }

    static func unescape(_ text: some StringProtocol) -> String {
        String(text)
            .replacingOccurrences(of: "&lt;", with: "<")
            .replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"")
            .replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    /// The one element called `name` in `text`; nil when there is none, more than one, or it is malformed.
    static func only(_ name: String, in text: Substring) -> Element? {
        let found = all(name, in: text)
        return found.count == 1 ? found[0] : nil
    }

    /// The text content of the one element `name`, unescaped.
    static func text(_ name: String, in text: Substring) -> String? {
        only(name, in: text).map { unescape($0.content) }
    }

    /// Every element called `name` (an element of the same name inside another one is not
    /// looked for), or `[]` when one of them is malformed.
    static func all(_ name: String, in text: Substring) -> [Element] {
        var found: [Element] = []
        var cursor = text.startIndex
        while let open = text.range(of: "<" + name, range: cursor..<text.endIndex) {
            guard open.upperBound < text.endIndex else { return [] }
            let next = text[open.upperBound]
            guard next == " " || next == "\n" || next == "\t" || next == "\r" || next == ">" || next == "/" else {
                cursor = open.upperBound
                continue
            }
            guard let close = text.range(of: ">", range: open.upperBound..<text.endIndex) else { return [] }
            var inside = text[open.upperBound..<close.lowerBound]
            let selfClosing = inside.hasSuffix("/")
            if selfClosing { inside = inside.dropLast() }
            guard let attributes = attributes(inside) else { return [] }
            if selfClosing {
                found.append(Element(attributes: attributes, content: "", whole: text[open.lowerBound..<close.upperBound]))
                cursor = close.upperBound
            } else {
                guard let end = text.range(of: "</" + name + ">", range: close.upperBound..<text.endIndex) else { return [] }
                found.append(
                    Element(
                        attributes: attributes, content: text[close.upperBound..<end.lowerBound],
                        whole: text[open.lowerBound..<end.upperBound]))
                cursor = end.upperBound
            }
        }
        return found
    }

    /// `name="value"` pairs of a start tag (after its name); nil when malformed or repeated.
    static func attributes(_ tag: Substring) -> [String: String]? {
        let bytes = Array(tag.utf8)
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        var out: [String: String] = [:]
        var i = 0
        while true {
            while i < bytes.count, isSpace(bytes[i]) { i += 1 }
            guard i < bytes.count else { return out }
            let nameStart = i
            while i < bytes.count, bytes[i] != UInt8(ascii: "="), !isSpace(bytes[i]) { i += 1 }
            let name = String(decoding: bytes[nameStart..<i], as: UTF8.self)
            while i < bytes.count, isSpace(bytes[i]) { i += 1 }
            guard !name.isEmpty, i < bytes.count, bytes[i] == UInt8(ascii: "=") else { return nil }
            i += 1
            while i < bytes.count, isSpace(bytes[i]) { i += 1 }
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") || bytes[i] == UInt8(ascii: "'") else { return nil }
            let quote = bytes[i]
            i += 1
            let valueStart = i
            while i < bytes.count, bytes[i] != quote { i += 1 }
            guard i < bytes.count, out[name] == nil else { return nil }
            out[name] = unescape(String(decoding: bytes[valueStart..<i], as: UTF8.self))
            i += 1
        }
    }
}

enum SAMLNamespace {
    static let protocol_ = "urn:oasis:names:tc:SAML:2.0:protocol"
    static let assertion = "urn:oasis:names:tc:SAML:2.0:assertion"
    static let signature = "http://www.w3.org/2000/09/xmldsig#"
    static let success = "urn:oasis:names:tc:SAML:2.0:status:Success"
}

/// SAML's `xs:dateTime`, in UTC to the second.
enum SAMLTime {
    static func format(_ date: Date) -> String { date.formatted(.iso8601) }
    static func parse(_ text: String?) -> Date? { text.flatMap { try? Date($0, strategy: .iso8601) } }
}

/// An XML ID: `_` and 32 hex digits.
func samlID() -> String { "_" + Hex.encode(SecureRandom.bytes(16)) }

/// The SP's `samlp:AuthnRequest`, sent base64-encoded (not deflated) in `SAMLRequest`.
struct AuthnRequest: Equatable {
    let id: String
    let issueInstant: Date
    /// Where the IdP is to post the answer: `{external base}/saml/acs`.
    let acsURL: String
    /// The SP's entity ID (its external base URL), the assertion's audience.
    let issuer: String
    let destination: String

    var xml: String {
        """
        <samlp:AuthnRequest xmlns:samlp="\(SAMLNamespace.protocol_)" xmlns:saml="\(SAMLNamespace.assertion)" \
        ID="\(id)" Version="2.0" IssueInstant="\(SAMLTime.format(issueInstant))" \
        Destination="\(MiniXML.escape(destination))" \
        ProtocolBinding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST" \
        AssertionConsumerServiceURL="\(MiniXML.escape(acsURL))">\
        <saml:Issuer>\(MiniXML.escape(issuer))</saml:Issuer>\
        <samlp:NameIDPolicy Format="urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified" AllowCreate="true"/>\
        </samlp:AuthnRequest>
        """
    }

    var encoded: String { Base64.encode(Array(xml.utf8)) }

    /// The request in a `SAMLRequest` value; nil unless it is one this SP could have written.
    init?(encoded: String) {
        guard let bytes = Base64.decode(encoded.trimmingCharacters(in: .whitespacesAndNewlines)),
            let text = String(validating: bytes, as: UTF8.self),
            let element = MiniXML.only("samlp:AuthnRequest", in: text[...]),
            let id = element.attributes["ID"], !id.isEmpty,
            let acsURL = element.attributes["AssertionConsumerServiceURL"], !acsURL.isEmpty,
            let issuer = MiniXML.text("saml:Issuer", in: element.content), !issuer.isEmpty
        else { return nil }
        self.init(
            id: id, issueInstant: SAMLTime.parse(element.attributes["IssueInstant"]) ?? Date(), acsURL: acsURL, issuer: issuer,
            destination: element.attributes["Destination"] ?? "")
    }

    init(id: String = samlID(), issueInstant: Date = Date(), acsURL: String, issuer: String, destination: String) {
        self.id = id
        self.issueInstant = issueInstant
        self.acsURL = acsURL
        self.issuer = issuer
        self.destination = destination
    }
}

/// The IdP's `samlp:Response` with one assertion and a signature element holding the hex
/// HMAC-SHA256 of the assertion's text exactly as it appears in the response.
struct SAMLResponseMessage {
    let request: AuthnRequest
    let idpEntityID: String
    let user: String
    let lifetime: Duration
    let now: Date

    func encoded(signingKey: [UInt8]) -> String {
        let notOnOrAfter = SAMLTime.format(now.addingTimeInterval(Double(lifetime.components.seconds)))
        let instant = SAMLTime.format(now)
        let acs = MiniXML.escape(request.acsURL)
        let inResponseTo = MiniXML.escape(request.id)
        let issuer = "<saml:Issuer>\(MiniXML.escape(idpEntityID))</saml:Issuer>"
        let assertion = """
            <saml:Assertion xmlns:saml="\(SAMLNamespace.assertion)" ID="\(samlID())" Version="2.0" IssueInstant="\(instant)">\
            \(issuer)\
            <saml:Subject>\
            <saml:NameID Format="urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified">\(MiniXML.escape(user))</saml:NameID>\
            <saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">\
            <saml:SubjectConfirmationData InResponseTo="\(inResponseTo)" Recipient="\(acs)" NotOnOrAfter="\(notOnOrAfter)"/>\
            </saml:SubjectConfirmation>\
            </saml:Subject>\
            <saml:Conditions NotBefore="\(instant)" NotOnOrAfter="\(notOnOrAfter)">\
            <saml:AudienceRestriction><saml:Audience>\(MiniXML.escape(request.issuer))</saml:Audience></saml:AudienceRestriction>\
            </saml:Conditions>\
            <saml:AuthnStatement AuthnInstant="\(instant)">\
            <saml:AuthnContext><saml:AuthnContextClassRef>\
            urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport\
            </saml:AuthnContextClassRef></saml:AuthnContext>\
            </saml:AuthnStatement>\
            </saml:Assertion>
            """
        let signature = Hex.encode(HMACSHA256.authenticate(Array(assertion.utf8), key: signingKey))
        let response = """
            <samlp:Response xmlns:samlp="\(SAMLNamespace.protocol_)" xmlns:saml="\(SAMLNamespace.assertion)" \
            ID="\(samlID())" Version="2.0" IssueInstant="\(instant)" Destination="\(acs)" InResponseTo="\(inResponseTo)">\
            \(issuer)\
            <samlp:Status><samlp:StatusCode Value="\(SAMLNamespace.success)"/></samlp:Status>\
            \(assertion)\
            <ds:Signature xmlns:ds="\(SAMLNamespace.signature)"><ds:SignedInfo>\
            <ds:SignatureMethod Algorithm="http://www.w3.org/2001/04/xmldsig-more#hmac-sha256"/>\
            <ds:Reference URI="#assertion"/></ds:SignedInfo>\
            <ds:SignatureValue>\(signature)</ds:SignatureValue></ds:Signature>\
            </samlp:Response>
            """
        return Base64.encode(Array(response.utf8))
    }
}

/// What the SP learnt from a SAMLResponse it accepted.
struct VerifiedAssertion {
    let user: String
    let responseID: String
    let assertionID: String
    let notOnOrAfter: Date
}

/// Why the ACS refused a SAMLResponse (the `403` text).
struct SAMLRejection: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// The SP's checks of a SAMLResponse: the IdP's signature over the assertion, success status,
/// destination and recipient, audience, validity window. (One-time use is `SAMLState.useOnce`.)
enum SAMLResponseCheck {
    /// Clocks of SP and IdP may differ this much for `NotBefore`.
    static let skew: TimeInterval = 60

    static func verify(
        _ encoded: String, signingKey: [UInt8], acsURL: String, audience: String, now: Date
    ) -> Result<VerifiedAssertion, SAMLRejection> {
        guard let bytes = Base64.decode(encoded.trimmingCharacters(in: .whitespacesAndNewlines)),
            let text = String(validating: bytes, as: UTF8.self)
        else { return .failure(SAMLRejection("SAMLResponse is not base64-encoded UTF-8")) }
        guard let response = MiniXML.only("samlp:Response", in: text[...]),
            let assertion = MiniXML.only("saml:Assertion", in: response.content),
            let signatureHex = MiniXML.text("ds:SignatureValue", in: response.content),
            let signature = Hex.decode(signatureHex)
        else { return .failure(SAMLRejection("not a SAML response with one signed assertion")) }
        let expected = HMACSHA256.authenticate(Array(assertion.whole.utf8), key: signingKey)
        guard constantTimeEquals(signature, expected) else {
            return .failure(SAMLRejection("the assertion's signature does not verify"))
        }
        // Everything below is read from the signed assertion, except the response's own envelope.
        guard MiniXML.only("samlp:StatusCode", in: response.content)?.attributes["Value"] == SAMLNamespace.success else {
            return .failure(SAMLRejection("the IdP did not report success"))
        }
        guard response.attributes["Destination"] == acsURL else {
            return .failure(SAMLRejection("Destination is not this SP's ACS URL \(acsURL)"))
        }
        guard let confirmation = MiniXML.only("saml:SubjectConfirmationData", in: assertion.content),
            confirmation.attributes["Recipient"] == acsURL
        else { return .failure(SAMLRejection("the assertion's Recipient is not this SP's ACS URL \(acsURL)")) }
        guard MiniXML.text("saml:Audience", in: assertion.content) == audience else {
            return .failure(SAMLRejection("the assertion is meant for another audience"))
        }
        guard let conditions = MiniXML.only("saml:Conditions", in: assertion.content),
            let notOnOrAfter = SAMLTime.parse(conditions.attributes["NotOnOrAfter"]),
            let confirmationEnd = SAMLTime.parse(confirmation.attributes["NotOnOrAfter"]),
            let notBefore = SAMLTime.parse(conditions.attributes["NotBefore"])
        else { return .failure(SAMLRejection("the assertion has no validity window")) }
        guard now < notOnOrAfter, now < confirmationEnd else { return .failure(SAMLRejection("the assertion has expired")) }
        guard notBefore <= now.addingTimeInterval(skew) else { return .failure(SAMLRejection("the assertion is not valid yet")) }
        guard let user = MiniXML.text("saml:NameID", in: assertion.content), !user.isEmpty,
            let responseID = response.attributes["ID"], !responseID.isEmpty,
            let assertionID = assertion.attributes["ID"], !assertionID.isEmpty
        else { return .failure(SAMLRejection("the assertion names no user")) }
        return .success(
            VerifiedAssertion(
                user: user, responseID: responseID, assertionID: assertionID, notOnOrAfter: min(notOnOrAfter, confirmationEnd)))
    }
}
