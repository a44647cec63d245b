/// Why a `SAMLResponse` gave no identity: which check failed, never the document.
/// `check.description` is a stable code (`signature_invalid`) for logs and audit events;
/// `description` says it in words.
public struct SAMLIdentityError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Check: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case notBase64 = "not_base64"
            case tooLarge = "too_large"
            case notXML = "not_xml"
            case documentType = "document_type"
            case notAResponse = "not_a_response"
            case statusNotSuccess = "status_not_success"
            case encryptedAssertion = "encrypted_assertion"
            case noAssertion = "no_assertion"
            case multipleAssertions = "multiple_assertions"
            case assertionMisplaced = "assertion_misplaced"
            case badID = "bad_id"
            case duplicateID = "duplicate_id"
            case unsigned
            case signatureMisplaced = "signature_misplaced"
            case signatureMalformed = "signature_malformed"
            case emptyReference = "empty_reference"
            case referenceElsewhere = "reference_elsewhere"
            case sha1Refused = "sha1_refused"
            case algorithmRefused = "algorithm_refused"
            case noUsableCertificate = "no_usable_certificate"
            case signatureInvalid = "signature_invalid"
            case missingIssuer = "missing_issuer"
            case issuerMismatch = "issuer_mismatch"
            case missingNameID = "missing_name_id"
            case nameIDNotText = "name_id_not_text"
            case badText = "bad_text"
            case libraryUnavailable = "library_unavailable"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }
        public var description: String { base.rawValue }

        /// The form field is not base64.
        public static let notBase64 = Check(.notBase64)
        /// More than `SAMLIdentityReader.maxDecodedBytes` decoded (or its base64 far longer).
        public static let tooLarge = Check(.tooLarge)
        /// Not well-formed XML (or not UTF-8: a NUL byte).
        public static let notXML = Check(.notXML)
        /// A `<!DOCTYPE`: DTDs and entities are refused before they are read.
        public static let documentType = Check(.documentType)
        /// The root is not a SAML 2.0 protocol `Response`.
        public static let notAResponse = Check(.notAResponse)
        /// The `Response` has no `Status`, or its top-level code is not Success.
        public static let statusNotSuccess = Check(.statusNotSuccess)
        /// An `EncryptedAssertion` or `EncryptedID`: Parley holds no decryption key.
        public static let encryptedAssertion = Check(.encryptedAssertion)
        /// No `Assertion` at all.
        public static let noAssertion = Check(.noAssertion)
        /// More than one element named `Assertion`, anywhere in the document.
        public static let multipleAssertions = Check(.multipleAssertions)
        /// The one `Assertion` is not a SAML assertion directly inside the `Response`.
        public static let assertionMisplaced = Check(.assertionMisplaced)
        /// The `Response` or the `Assertion` has no `ID`, or one that is not a plain NCName.
        public static let badID = Check(.badID)
        /// The `ID` of the `Response` or the `Assertion` appears more than once.
        public static let duplicateID = Check(.duplicateID)
        /// Neither the `Response` nor the `Assertion` carries a signature.
        public static let unsigned = Check(.unsigned)
        /// A `Signature` that is not a direct child of the `Response` or the `Assertion`, or two in one.
        public static let signatureMisplaced = Check(.signatureMisplaced)
        /// A `Signature` that is not `SignedInfo` (one `Reference`), `SignatureValue` and an optional `KeyInfo`.
        public static let signatureMalformed = Check(.signatureMalformed)
        /// A `Reference` whose `URI` is empty or missing (the whole document).
        public static let emptyReference = Check(.emptyReference)
        /// A `Reference` to anything but the element that holds the signature.
        public static let referenceElsewhere = Check(.referenceElsewhere)
        /// SHA-1, as signature or digest.
        public static let sha1Refused = Check(.sha1Refused)
        /// An algorithm other than RSA-SHA256/ECDSA-SHA256, SHA-256, exclusive c14n and
        /// enveloped-signature (in that order).
        public static let algorithmRefused = Check(.algorithmRefused)
        /// None of the trusted certificates could be loaded.
        public static let noUsableCertificate = Check(.noUsableCertificate)
        /// A signature does not verify with any trusted certificate.
        public static let signatureInvalid = Check(.signatureInvalid)
        /// The `Assertion` has no single `Issuer`.
        public static let missingIssuer = Check(.missingIssuer)
        /// The `Response`'s `Issuer` names another issuer than the `Assertion`'s.
        public static let issuerMismatch = Check(.issuerMismatch)
        /// The `Assertion` has no single `Subject` with a single `NameID`.
        public static let missingNameID = Check(.missingNameID)
        /// The `NameID` or `Issuer` holds a comment, an element or a processing instruction.
        public static let nameIDNotText = Check(.nameIDNotText)
        /// An empty, over-long or control-character `NameID`, `Format` or `Issuer`.
        public static let badText = Check(.badText)
        /// libxml2 or xmlsec could not be set up in this process.
        public static let libraryUnavailable = Check(.libraryUnavailable)

        var explanation: String {
            switch base {
            case .notBase64: "the SAMLResponse is not base64"
            case .tooLarge: "the SAMLResponse is larger than \(SAMLIdentityReader.maxDecodedBytes / 1024) KiB"
            case .notXML: "the SAMLResponse is not well-formed UTF-8 XML"
            case .documentType: "the SAMLResponse declares a document type (DTDs and entities are refused)"
            case .notAResponse: "the SAMLResponse is not a SAML 2.0 protocol Response"
            case .statusNotSuccess: "the Response's status is missing or not Success"
            case .encryptedAssertion: "the Response carries an encrypted assertion or NameID, which Parley cannot read"
            case .noAssertion: "the Response holds no Assertion"
            case .multipleAssertions: "the Response holds more than one Assertion"
            case .assertionMisplaced: "the Assertion is not a SAML assertion directly inside the Response"
            case .badID: "the Response or the Assertion has a missing or malformed ID"
            case .duplicateID: "the ID of the Response or the Assertion appears more than once"
            case .unsigned: "neither the Response nor the Assertion is signed"
            case .signatureMisplaced: "a Signature is not a direct child of the Response or the Assertion, or there are two in one"
            case .signatureMalformed: "a Signature is not SignedInfo with one Reference, SignatureValue and an optional KeyInfo"
            case .emptyReference: "a signature's Reference URI is empty or missing"
            case .referenceElsewhere: "a signature's Reference does not point at the element that holds the signature"
            case .sha1Refused: "a signature uses SHA-1"
            case .algorithmRefused: "a signature uses an algorithm other than RSA-SHA256 or ECDSA-SHA256 with SHA-256 digests, enveloped-signature and exclusive c14n"
            case .noUsableCertificate: "none of the identity provider certificates could be loaded"
            case .signatureInvalid: "a signature does not verify with the identity provider's certificates"
            case .missingIssuer: "the Assertion has no single Issuer"
            case .issuerMismatch: "the Response's Issuer differs from the Assertion's"
            case .missingNameID: "the Assertion has no single Subject with a single NameID"
            case .nameIDNotText: "the NameID or Issuer holds markup, not only text"
            case .badText: "the NameID, its Format or the Issuer is empty, longer than \(SAMLIdentityReader.maxTextBytes) bytes or holds control characters"
            case .libraryUnavailable: "the XML security library could not be initialised"
            }
        }
    }

    public let check: Check
    public init(_ check: Check) { self.check = check }
    public var description: String { check.explanation }
}
