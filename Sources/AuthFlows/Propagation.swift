import Conversation
public import Foundation
import JWTKit
import ParleyCrypto
import ParleyEncoding

/// The verified user a registration's propagation grants speak for: the identity token the
/// client proved it with (kept sealed while a destination needs it, never logged, never sent
/// anywhere but to the destination's authorization server), when it expires, and its claims.
public struct PropagatedIdentity: Sendable, Codable, Equatable {
    /// The client's identity token; nil for an agent, whose access token is Parley's alone and is
    /// never kept or sent anywhere (Parley signs a token of its own for the user instead).
    public var token: String?
    public var expiresAt: Date?
    public var issuer: String
    public var subject: String
    /// The token's string claims (what a destination's `subjectClaim` picks from).
    public var claims: [String: String]
    /// The agent's OAuth client (`act.sub` of the token Parley signs for it); nil for a thin client.
    public var agentClient: String?
    /// When the user last authenticated at the identity provider (`auth_time`, else `iat`): what
    /// Parley's own assertions say, never "now".
    public var authenticatedAt: Date?
    /// The token's `iat`: a revocation of the user after it stops every grant from this identity.
    public var issuedAt: Date?

    public init(
        token: String?, expiresAt: Date?, issuer: String, subject: String, claims: [String: String], agentClient: String? = nil,
        authenticatedAt: Date? = nil, issuedAt: Date? = nil
    ) {
        self.issuedAt = issuedAt
        self.token = token
        self.expiresAt = expiresAt
        self.issuer = issuer
        self.subject = subject
        self.claims = claims
        self.agentClient = agentClient
        self.authenticatedAt = authenticatedAt
    }

    public init(token: String, verified: VerifiedIdentity) {
        self.init(
            token: token, expiresAt: verified.expiresAt, issuer: verified.issuer, subject: verified.subject, claims: verified.claims,
            authenticatedAt: verified.authTime ?? verified.issuedAt, issuedAt: verified.issuedAt)
    }

    /// An agent's user, as its access token names it: the token itself is not kept.
    public init(agent client: String, verified: VerifiedIdentity) {
        self.init(
            token: nil, expiresAt: verified.expiresAt, issuer: verified.issuer, subject: verified.subject, claims: verified.claims,
            agentClient: client, authenticatedAt: verified.authTime ?? verified.issuedAt, issuedAt: verified.issuedAt)
    }

    /// Whether Parley may still speak for the user: the token has not expired.
    public func isCurrent(at now: Date) -> Bool { expiresAt.map { $0 > now } ?? true }
}

/// Parley's own signing keys (`PARLEY_SIGNING_KEYS`: `kid:<path to PEM private key>[,…]`): RSA
/// (2048 bits or more, RS256) or EC P-256 (ES256). The first signs; every key is published, so
/// that an authorization server keeps trusting assertions signed before a rotation.
public final class ParleySigningKeys: Sendable {
    public enum Algorithm: String, Sendable { case rs256 = "RS256", es256 = "ES256" }

    public struct Entry: Sendable {
        public let kid: String
        public let algorithm: Algorithm
        /// The public key as a JWK object (`kty`, `use`, `alg`, `kid`, and `n`/`e` or `crv`/`x`/`y`).
        public let jwk: [String: String]
        /// The certificate the key file holds beside the key (base64 DER), for SAML metadata; nil without one.
        public let certificateDER: String?
        fileprivate let key: Key
        /// The key file as read, for libxmlsec1 (SAML assertions); never logged or shown.
        let pem: [UInt8]
    }

    fileprivate enum Key: Sendable {
        case rsa(Insecure.RSA.PrivateKey)
        case es256(ES256PrivateKey)
    }

    public struct Problem: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// A PEM larger than this is not one private key.
    public static let maxPEMBytes = 64 * 1024

    public let entries: [Entry]

    /// The public keys as a JWK Set (RFC 7517), JSON with sorted keys; written once, served as is.
    public let jwks: [UInt8]

    private init(entries: [Entry]) {
        self.entries = entries
        let document = ["keys": entries.map(\.jwk)]
        jwks = (try? Array(JSONSerialization.data(withJSONObject: document, options: [.sortedKeys, .withoutEscapingSlashes])))
            ?? Array(#"{"keys":[]}"#.utf8)
    }

    /// The kid that signs.
    public var signingKid: String { entries.first?.kid ?? "" }

    /// Reads `kid:path[,kid:path…]`; `read` returns a file's bytes (nil when it cannot be read).
    /// Problems name the kid and the path, never key material.
    public static func parse(_ text: String, read: (String) -> [UInt8]?) throws(Problem) -> ParleySigningKeys {
        var entries: [Entry] = []
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            guard let colon = item.firstIndex(of: ":") else { throw Problem(description: "'\(item.prefix(80))' is not kid:<path>") }
            let kid = String(item[..<colon])
            let path = String(item[item.index(after: colon)...])
            guard !kid.isEmpty, kid.utf8.count <= 64, kid.utf8.allSatisfy({ isKidByte($0) }) else {
                throw Problem(description: "key id '\(kid.prefix(64))' must be 1 to 64 letters, digits, '.', '_' or '-'")
            }
            guard !entries.contains(where: { $0.kid == kid }) else { throw Problem(description: "key id '\(kid)' is listed twice") }
            guard let bytes = read(path), bytes.count <= maxPEMBytes else {
                throw Problem(description: "key '\(kid)': \(path.prefix(300)) cannot be read (or is larger than 64 KiB)")
            }
            let text = String(decoding: bytes, as: UTF8.self)
            let certificate = try certificateBlock(in: text, kid: kid)
            // The key parsers read the key's own block only.
            let pem = certificate.map { text.replacingOccurrences(of: $0.pem, with: "") } ?? text
            if let rsa = try? Insecure.RSA.PrivateKey(pem: pem) {
                if let certificate, (try? Insecure.RSA.PublicKey(certificatePEM: certificate.pem)) != rsa.publicKey {
                    throw Problem(description: "key '\(kid)': the certificate in \(path.prefix(300)) is not the key's")
                }
                guard let primitives = try? rsa.publicKey.getKeyPrimitives() else {
                    throw Problem(description: "key '\(kid)': the RSA public key cannot be read")
                }
                entries.append(Entry(kid: kid, algorithm: .rs256, jwk: [
                    "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                    "n": Base64URL.encode(Array(primitives.modulus)), "e": Base64URL.encode(Array(primitives.publicExponent)),
                ], certificateDER: certificate?.der, key: .rsa(rsa), pem: bytes))
            } else if let ec = try? ES256PrivateKey(pem: pem), let point = ec.publicKey.parameters {
                if let certificate, (try? ES256PublicKey(certificate: certificate.pem)) != ec.publicKey {
                    throw Problem(description: "key '\(kid)': the certificate in \(path.prefix(300)) is not the key's")
                }
                entries.append(Entry(kid: kid, algorithm: .es256, jwk: [
                    "kty": "EC", "use": "sig", "alg": "ES256", "kid": kid, "crv": "P-256", "x": point.x, "y": point.y,
                ], certificateDER: certificate?.der, key: .es256(ec), pem: bytes))
            } else {
                throw Problem(description: "key '\(kid)': \(path.prefix(300)) is not a PEM private key of RSA (2048 bits or more) or EC P-256")
            }
        }
        guard !entries.isEmpty else { throw Problem(description: "no key is listed (kid:<path to PEM private key>[,…])") }
        return ParleySigningKeys(entries: entries)
    }

    /// The one certificate a key file may hold beside its key: its PEM and its base64 DER.
    private static func certificateBlock(in pem: String, kid: String) throws(Problem) -> (pem: String, der: String)? {
        let begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----"
        guard let start = pem.range(of: begin) else { return nil }
        guard let stop = pem.range(of: end, range: start.upperBound..<pem.endIndex),
            pem.range(of: begin, range: stop.upperBound..<pem.endIndex) == nil
        else { throw Problem(description: "key '\(kid)': the file must hold at most one whole certificate") }
        let block = String(pem[start.lowerBound..<stop.upperBound])
        do { try SigningCertificate.check(pem: block) } catch {
            throw Problem(description: "key '\(kid)': the certificate beside the key \(error)")
        }
        let der = pem[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
        return (block, String(der))
    }

    /// The entity id of Parley's SAML metadata and assertions (`PARLEY_PUBLIC_URL`) and the
    /// certificates of the ring, as SAML 2.0 metadata; nil when no key has a certificate.
    public func samlMetadata(entityID: String) -> String? {
        let certificates = entries.compactMap(\.certificateDER)
        guard !certificates.isEmpty else { return nil }
        let descriptors = certificates.map { der in
            """
                <md:KeyDescriptor use="signing"><ds:KeyInfo><ds:X509Data><ds:X509Certificate>\(der)</ds:X509Certificate></ds:X509Data></ds:KeyInfo></md:KeyDescriptor>
            """
        }.joined(separator: "\n")
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" xmlns:ds="http://www.w3.org/2000/09/xmldsig#" entityID="\(XMLText.escaped(entityID))">
              <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
            \(descriptors)
              </md:IDPSSODescriptor>
            </md:EntityDescriptor>

            """
    }

    /// The key that signs SAML assertions: the first with a certificate (the one the metadata publishes).
    var samlSigningEntry: Entry? { entries.first(where: { $0.certificateDER != nil }) }

    /// A JWT bearer assertion (RFC 7523 §3) Parley signs for a user with its first key; with
    /// `actor`, the client acting for the user (RFC 8693 §4.1 `act`); `authenticatedAt`, when the
    /// user last authenticated (`auth_time`: `iat` is when Parley signed, not when anyone signed in).
    public func assertion(
        issuer: String, subject: String, audience: String, now: Date, lifetime: TimeInterval = 300, actor: String? = nil,
        authenticatedAt: Date? = nil
    ) async throws -> String {
        // Whole seconds: a verifier that compares `nbf` with its integer clock (Authlib) refuses
        // an assertion whose `nbf` is a fraction of a second ahead of it.
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = AssertionClaims(
            iss: IssuerClaim(value: issuer), sub: SubjectClaim(value: subject), aud: AudienceClaim(value: [audience]),
            iat: IssuedAtClaim(value: now), nbf: NotBeforeClaim(value: now), exp: ExpirationClaim(value: now.addingTimeInterval(lifetime)),
            jti: IDClaim(value: UUID().uuidString.lowercased()), act: actor.map { Actor(sub: $0) },
            auth_time: authenticatedAt.map { Int64($0.timeIntervalSince1970.rounded(.down)) })
        guard let signing = entries.first else { throw Problem(description: "no signing key") }
        let keys = JWTKeyCollection()
        let kid = JWKIdentifier(string: signing.kid)
        switch signing.key {
        case .rsa(let key): await keys.add(rsa: key, digestAlgorithm: .sha256, kid: kid)
        case .es256(let key): await keys.add(ecdsa: key, kid: kid)
        }
        var header = JWTHeader()
        header.typ = "JWT"
        return try await keys.sign(claims, kid: kid, header: header)
    }

    private static func isKidByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default: false
        }
    }

    struct AssertionClaims: JWTPayload {
        let iss: IssuerClaim
        let sub: SubjectClaim
        let aud: AudienceClaim
        let iat: IssuedAtClaim
        let nbf: NotBeforeClaim
        let exp: ExpirationClaim
        let jti: IDClaim
        let act: Actor?
        let auth_time: Int64?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    struct Actor: Codable, Sendable {
        let sub: String
    }
}

/// What a SAML 2.0 bearer assertion says, and the key that signs it.
public struct SAMLAssertionRequest: Sendable {
    public let issuer: String
    public let nameID: String
    public let nameIDFormat: String
    public let audience: String
    public let recipient: String
    /// Seconds since 1970.
    public let issuedAt: Int64
    /// When the user last authenticated (`AuthnInstant`), seconds since 1970; nil: unknown (`issuedAt` then).
    public let authnInstant: Int64?
    /// The signing key's PEM file (never logged or shown).
    public let privateKeyPEM: [UInt8]
    public let ecdsa: Bool
}

/// Signs a SAML assertion (libxmlsec1, in the SAMLIdentity target): handed in by the server,
/// so that this target never loads libxml2's headers beside Foundation.
public typealias SAMLAssertionSigning = @Sendable (SAMLAssertionRequest) async throws -> [UInt8]

/// What a propagation grant sends to the token endpoint for a user.
enum PropagationGrant {
    /// The form parameters of the grant, or why the user cannot be spoken for now.
    static func parameters(
        _ propagation: OAuth2Settings.Propagation, grant: OAuth2Settings.Grant, identity: PropagatedIdentity?,
        signer: ParleySigningKeys?, samlSigner: SAMLAssertionSigning? = nil, issuer: String, scopes: [String], now: Date
    ) async throws -> [(String, String)] {
        guard let identity else {
            throw OAuth2Error(.identityTokenExpired, detail: "this registration holds no identity token; renew it with PUT /v1/registrations/me/identity")
        }
        guard identity.isCurrent(at: now) else {
            throw OAuth2Error(
                .identityTokenExpired,
                detail: "the registration's identity token has expired; renew it with PUT /v1/registrations/me/identity and try again")
        }
        var parameters: [(String, String)]
        /// An agent's user, as Parley vouches for them: its own JWT (`iss` Parley, `sub` the user,
        /// `act` the agent's client), since the agent's token goes nowhere (RFC 8693 §4.1).
        func agentAssertion(_ client: String) async throws -> String {
            guard let signer else {
                throw OAuth2Error(.refused, detail: "Parley has no signing key (PARLEY_SIGNING_KEYS) to speak for an agent's user")
            }
            guard let subject = identity.claims[propagation.subjectClaim], !subject.isEmpty else {
                throw OAuth2Error(
                    .refused, detail: "the access token has no string '\(propagation.subjectClaim.prefix(200))' claim for the subject token's subject")
            }
            return try await signer.assertion(
                issuer: issuer, subject: subject, audience: propagation.assertionAudience, now: now, actor: client,
                authenticatedAt: identity.authenticatedAt)
        }
        switch grant {
        case .tokenExchange:
            let subjectToken: String
            let subjectTokenType: String
            if let client = identity.agentClient {
                subjectToken = try await agentAssertion(client)
                subjectTokenType = OAuth2Settings.Propagation.subjectTokenTypes["jwt"] ?? "urn:ietf:params:oauth:token-type:jwt"
            } else if let token = identity.token {
                subjectToken = token
                subjectTokenType = propagation.subjectTokenType
            } else {
                throw OAuth2Error(.identityTokenExpired, detail: "this registration holds no identity token; renew it with PUT /v1/registrations/me/identity")
            }
            parameters = [
                ("grant_type", OAuth2Settings.Propagation.tokenExchangeGrantType), ("subject_token", subjectToken),
                ("subject_token_type", subjectTokenType),
            ]
            if let audience = propagation.audience { parameters.append(("audience", audience)) }
            if let resource = propagation.resource { parameters.append(("resource", resource)) }
        case .saml2Bearer:
            guard let signer else {
                throw OAuth2Error(.refused, detail: "Parley has no signing key (PARLEY_SIGNING_KEYS) for its SAML assertion")
            }
            guard let nameID = identity.claims[propagation.nameIdClaim], !nameID.isEmpty else {
                throw OAuth2Error(
                    .refused, detail: "the identity token has no string '\(propagation.nameIdClaim.prefix(200))' claim for the assertion's NameID")
            }
            // Recipient: the token endpoint (`assertionAudience` is its default and only `jwt_bearer` may change it).
            guard let key = signer.samlSigningEntry else {
                throw OAuth2Error(.refused, detail: "no signing key of Parley's has a certificate for its SAML assertion")
            }
            guard let samlSigner else { throw OAuth2Error(.refused, detail: "Parley cannot sign SAML assertions in this process") }
            let xml: [UInt8]
            do {
                xml = try await samlSigner(
                    SAMLAssertionRequest(
                        issuer: issuer, nameID: nameID, nameIDFormat: propagation.nameIdFormat, audience: propagation.samlAudience,
                        recipient: propagation.assertionAudience, issuedAt: Int64(now.timeIntervalSince1970.rounded(.down)),
                        authnInstant: identity.authenticatedAt.map { Int64($0.timeIntervalSince1970.rounded(.down)) },
                        privateKeyPEM: key.pem, ecdsa: key.algorithm == .es256))
            } catch {
                throw OAuth2Error(.refused, detail: "Parley could not sign its SAML assertion: \(error)")
            }
            parameters = [("grant_type", OAuth2Settings.Propagation.saml2BearerGrantType), ("assertion", Base64URL.encode(xml))]
        case .jwtBearer:
            let assertion: String
            switch propagation.assertion {
            case .identityToken:
                if let client = identity.agentClient {
                    assertion = try await agentAssertion(client)
                } else if let token = identity.token {
                    assertion = token
                } else {
                    throw OAuth2Error(.identityTokenExpired, detail: "this registration holds no identity token; renew it with PUT /v1/registrations/me/identity")
                }
            case .parley:
                guard let signer else {
                    throw OAuth2Error(.refused, detail: "Parley has no signing key (PARLEY_SIGNING_KEYS) for its assertion")
                }
                guard let subject = identity.claims[propagation.subjectClaim], !subject.isEmpty else {
                    throw OAuth2Error(
                        .refused, detail: "the identity token has no string '\(propagation.subjectClaim.prefix(200))' claim for the assertion's subject")
                }
                assertion = try await signer.assertion(
                    issuer: issuer, subject: subject, audience: propagation.assertionAudience, now: now, actor: identity.agentClient,
                    authenticatedAt: identity.authenticatedAt)
            }
            parameters = [("grant_type", OAuth2Settings.Propagation.jwtBearerGrantType), ("assertion", assertion)]
        default:
            throw OAuth2Error(.refused, detail: "\(grant.rawValue) is not a propagation grant")
        }
        if !scopes.isEmpty { parameters.append(("scope", scopes.joined(separator: " "))) }
        return parameters
    }
}
