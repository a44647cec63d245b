import Conversation

/// An issuer of identity tokens (OIDC ID tokens, RFC 9068 access tokens) that Parley
/// trusts to say who a registration's user is: the destinations file's top-level
/// `identityProviders`, checked once at start.
public struct IdentityProvider: Sendable, Equatable {
    /// The `iss` its tokens carry, compared byte for byte.
    public let issuer: String
    /// Where its signing keys are published (a JWK Set over http(s)).
    public let jwksURI: String
    /// A token is for Parley when its `aud` names any of these.
    public let audiences: [String]
    /// The claim that names the user (default `sub`).
    public let userClaim: String

    public init(issuer: String, jwksURI: String, audiences: [String], userClaim: String = "sub") {
        self.issuer = issuer
        self.jwksURI = jwksURI
        self.audiences = audiences
        self.userClaim = userClaim
    }
}

/// An identity provider as written in the destinations file.
public struct IdentityProviderSpec: Sendable, Decodable, Equatable {
    public var issuer: String
    public var jwksUri: String
    public var audiences: [String]
    public var userClaim: String?

    public init(issuer: String, jwksUri: String, audiences: [String], userClaim: String? = nil) {
        self.issuer = issuer
        self.jwksUri = jwksUri
        self.audiences = audiences
        self.userClaim = userClaim
    }

    /// The checked provider, or every problem with this entry (`position` names it when the issuer is empty).
    public func validated(position: Int) throws(DestinationSpec.Invalid) -> IdentityProvider {
        var problems: [String] = []
        let label = issuer.isEmpty ? "identityProviders[\(position)]" : "identity provider '\(issuer.prefix(200))'"
        if issuer.isEmpty { problems.append("\(label): issuer must not be empty") }
        if issuer.utf8.count > 2048 { problems.append("\(label): issuer must be at most 2048 bytes") }
        if URLParts(jwksUri) == nil || jwksUri.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
            problems.append("\(label): jwksUri must be an absolute http(s) URL without user info, fragment, spaces or control characters")
        }
        if audiences.isEmpty { problems.append("\(label): audiences must name at least one audience") }
        if audiences.contains(where: \.isEmpty) { problems.append("\(label): audiences must not contain an empty string") }
        let claim = userClaim ?? "sub"
        if claim.isEmpty || claim.utf8.count > 200 { problems.append("\(label): userClaim must be a claim name of 1 to 200 bytes") }
        guard problems.isEmpty else { throw DestinationSpec.Invalid(problems: problems) }
        return IdentityProvider(issuer: issuer, jwksURI: jwksUri, audiences: audiences, userClaim: claim)
    }
}
