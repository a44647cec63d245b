internal import CXMLSec
import ParleyEncoding

/// A SAML 2.0 assertion Parley issues for a user and signs with its own key: what an OAuth2
/// SAML bearer grant (RFC 7522) sends as `assertion`. Enveloped signature over the assertion
/// (one `Reference` to its `ID`, exclusive c14n, SHA-256, RSA-SHA256 or ECDSA-SHA256), the
/// form `SAMLIdentityReader` and SAP's authorization servers verify.
public enum SAMLAssertionSigner {
    public enum Algorithm: Sendable {
        case rsaSHA256, ecdsaSHA256

        var uri: String {
            switch self {
            case .rsaSHA256: "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"
            case .ecdsaSHA256: "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256"
            }
        }
    }

    /// What the assertion says.
    public struct Fields: Sendable {
        public var issuer: String
        public var nameID: String
        public var nameIDFormat: String
        /// `Conditions/AudienceRestriction/Audience`: the authorization server's entity id.
        public var audience: String
        /// `SubjectConfirmationData/@Recipient`: the token endpoint.
        public var recipient: String
        /// Seconds since 1970 (this module stays clear of Foundation, whose ICU clashes with
        /// libxml2's in one clang module set).
        public var issuedAt: Int64
        public var lifetime: Int64
        /// When the user authenticated (`AuthnInstant`), seconds since 1970; nil: `issuedAt`.
        public var authnInstant: Int64?

        public init(
            issuer: String, nameID: String, nameIDFormat: String, audience: String, recipient: String, issuedAt: Int64,
            lifetime: Int64 = 300, authnInstant: Int64? = nil
        ) {
            self.authnInstant = authnInstant
            self.issuer = issuer
            self.nameID = nameID
            self.nameIDFormat = nameIDFormat
            self.audience = audience
            self.recipient = recipient
            self.issuedAt = issuedAt
            self.lifetime = lifetime
        }
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The signed assertion's XML (UTF-8).
    public static func sign(_ fields: Fields, privateKeyPEM: [UInt8], algorithm: Algorithm) throws(Failure) -> [UInt8] {
        guard XMLSecurity.isReady else { throw Failure(description: "libxmlsec1 is not usable") }
        // SystemRandomNumberGenerator draws from the kernel's CSPRNG (getrandom).
        var generator = SystemRandomNumberGenerator()
        let id = "_" + (0..<16).map { _ in String(UInt8.random(in: .min ... .max, using: &generator), radix: 16) }.map {
            $0.count == 1 ? "0" + $0 : $0
        }.joined()
        let template = Self.template(fields, id: id, algorithm: algorithm)
        let document: XMLDocument
        do { document = try XMLDocument(parsing: Array(template.utf8)) } catch { throw Failure(description: "the assertion template is not XML") }
        guard let assertion = document.root, let attribute = assertion.attributeNode("ID"), document.registerID(id, attribute: attribute),
            let signature = assertion.childElements.first(where: { $0.isElement("Signature", in: SAMLIdentityReader.dsigNS) })
        else { throw Failure(description: "the assertion template has no ID or Signature") }
        let key = privateKeyPEM.withUnsafeBufferPointer { c_parley_key_from_private_pem($0.baseAddress, $0.count) }
        guard let key else { throw Failure(description: "the signing key cannot be loaded") }
        guard c_parley_dsig_sign(key, signature) == 0 else { throw Failure(description: "the assertion could not be signed") }
        guard let bytes = document.serialized() else { throw Failure(description: "the signed assertion could not be written") }
        return bytes
    }

    static func template(_ f: Fields, id: String, algorithm: Algorithm) -> String {
        let issued = timestamp(f.issuedAt)
        let until = timestamp(f.issuedAt + f.lifetime)
        return """
            <saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="\(id)" Version="2.0" IssueInstant="\(issued)">\
            <saml:Issuer>\(XMLText.escaped(f.issuer))</saml:Issuer>\
            <ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:SignedInfo>\
            <ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>\
            <ds:SignatureMethod Algorithm="\(algorithm.uri)"/>\
            <ds:Reference URI="#\(id)"><ds:Transforms>\
            <ds:Transform Algorithm="http://www.w3.org/2000/09/xmldsig#enveloped-signature"/>\
            <ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms>\
            <ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue></ds:DigestValue></ds:Reference>\
            </ds:SignedInfo><ds:SignatureValue></ds:SignatureValue></ds:Signature>\
            <saml:Subject><saml:NameID Format="\(XMLText.escaped(f.nameIDFormat))">\(XMLText.escaped(f.nameID))</saml:NameID>\
            <saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">\
            <saml:SubjectConfirmationData NotOnOrAfter="\(until)" Recipient="\(XMLText.escaped(f.recipient))"/></saml:SubjectConfirmation></saml:Subject>\
            <saml:Conditions NotBefore="\(issued)" NotOnOrAfter="\(until)"><saml:AudienceRestriction>\
            <saml:Audience>\(XMLText.escaped(f.audience))</saml:Audience></saml:AudienceRestriction></saml:Conditions>\
            <saml:AuthnStatement AuthnInstant="\(timestamp(f.authnInstant ?? f.issuedAt))"><saml:AuthnContext>\
            <saml:AuthnContextClassRef>urn:oasis:names:tc:SAML:2.0:ac:classes:unspecified</saml:AuthnContextClassRef>\
            </saml:AuthnContext></saml:AuthnStatement></saml:Assertion>
            """
    }

    /// `xs:dateTime` in UTC, whole seconds (`2026-11-26T13:40:12Z`), for any time from 1970 to
    /// the year 9999; the civil date from days since the epoch (H. Hinnant's algorithm).
    public static func timestamp(_ seconds: Int64) -> String {
        let clamped = min(max(seconds, 0), 253_402_300_799)
        let days = clamped / 86_400, rest = clamped % 86_400
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(year)-\(two(month))-\(two(day))T\(two(rest / 3600)):\(two(rest % 3600 / 60)):\(two(rest % 60))Z"
    }
}
