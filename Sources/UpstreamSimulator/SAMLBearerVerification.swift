// No Foundation in this file: SAMLIdentity's C module (libxml2, whose headers include the
// system ICU) and Foundation's own ICU cannot be loaded into one compilation.
import ParleyEncoding
import SAMLIdentity

/// What the simulated authorization server makes of a SAML bearer assertion's signature.
enum SAMLBearerVerification {
    case verified(nameID: String)
    case refused(String)

    /// `xml` (one `Assertion`, without an XML declaration) placed in a successful `Response`
    /// and read with `SAMLIdentityReader` against `certificates`.
    static func check(_ xml: String, trusting certificates: [String]) -> SAMLBearerVerification {
        let wrapped = """
            <samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ID="_sim-wrap" Version="2.0" IssueInstant="2000-01-01T00:00:00Z">\
            <samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>\(xml)</samlp:Response>
            """
        switch SAMLIdentityReader.read(samlResponse: Base64.encode(Array(wrapped.utf8)), trusting: certificates) {
        case .success(let identity): return .verified(nameID: identity.nameID)
        case .failure(let error): return .refused("\(error.check)")
        }
    }
}
