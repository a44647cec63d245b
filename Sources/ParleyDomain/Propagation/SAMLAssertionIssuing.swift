// No Foundation in this file: SAMLIdentity's C module (libxml2, whose headers include the
// system ICU) and Foundation's own ICU are kept out of one compilation (UErrorCode); every
// other use of SAMLIdentity here sits in a file like this one (FlowKinds/SAML2Flow.swift).
package import AuthFlows
import NIOPosix
import SAMLIdentity

/// Parley's SAML assertions for `saml2_bearer` (AuthFlows' broker calls it). libxmlsec1's
/// signing (an RSA or ECDSA private-key operation) runs on NIO's thread pool, never on an event loop.
package enum SAMLAssertionIssuing {
    package static let sign: SAMLAssertionSigning = { request in
        let fields = SAMLAssertionSigner.Fields(
            issuer: request.issuer, nameID: request.nameID, nameIDFormat: request.nameIDFormat, audience: request.audience,
            recipient: request.recipient, issuedAt: request.issuedAt, authnInstant: request.authnInstant)
        return try await NIOThreadPool.singleton.runIfActive {
            try SAMLAssertionSigner.sign(fields, privateKeyPEM: request.privateKeyPEM, algorithm: request.ecdsa ? .ecdsaSHA256 : .rsaSHA256)
        }
    }
}
