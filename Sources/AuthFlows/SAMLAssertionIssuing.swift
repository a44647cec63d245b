// No Foundation in this file: SAMLIdentity's C module (libxml2, whose headers include the
// system ICU) and Foundation's own ICU cannot be loaded into one compilation (UErrorCode has
// different definitions); every use of SAMLIdentity in this target stays here.
import SAMLIdentity

/// Parley's SAML assertions for `saml2_bearer`, through SAMLIdentity's signer (libxmlsec1).
enum SAMLAssertionIssuing {
    static func sign(
        issuer: String, nameID: String, nameIDFormat: String, audience: String, recipient: String, issuedAt: Int64,
        privateKeyPEM: [UInt8], ecdsa: Bool
    ) -> Result<[UInt8], SAMLAssertionSigner.Failure> {
        let fields = SAMLAssertionSigner.Fields(
            issuer: issuer, nameID: nameID, nameIDFormat: nameIDFormat, audience: audience, recipient: recipient, issuedAt: issuedAt)
        do {
            return .success(try SAMLAssertionSigner.sign(fields, privateKeyPEM: privateKeyPEM, algorithm: ecdsa ? .ecdsaSHA256 : .rsaSHA256))
        } catch {
            return .failure(error)
        }
    }
}
