/// A client of the simulated OAuth2 authorization server.
public struct OAuthClient: Sendable, Equatable {
    public var id: String
    /// nil for a public client (it sends only `client_id`, and must use PKCE for codes).
    public var secret: String?
    /// Exact redirect URIs allowed; empty allows any absolute http(s) URI without a fragment.
    public var redirectURIs: [String]

    public init(id: String, secret: String?, redirectURIs: [String] = []) {
        self.id = id
        self.secret = secret
        self.redirectURIs = redirectURIs
    }

    public var isConfidential: Bool { secret != nil }

    /// The default clients: `parley-confidential` (secret `s3cret`) and public `parley-public`.
    public static let defaults: [OAuthClient] = [
        OAuthClient(id: "parley-confidential", secret: "s3cret"),
        OAuthClient(id: "parley-public", secret: nil),
    ]

    /// Whether `uri` may receive this client's codes.
    func allows(redirectURI uri: String) -> Bool {
        if !redirectURIs.isEmpty { return redirectURIs.contains(uri) }
        guard let parts = URLParts(uri) else { return false }
        return parts.isAcceptableRedirect
    }
}

/// Just enough URI parsing to vet a redirect URI without Foundation's lenience.
private struct URLParts {
    let scheme: String
    let rest: Substring

    init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        scheme = text[..<colon].lowercased()
        rest = text[text.index(after: colon)...]
    }

    var isAcceptableRedirect: Bool {
        guard scheme == "http" || scheme == "https", rest.hasPrefix("//"), !rest.contains("#") else { return false }
        let authority = rest.dropFirst(2).prefix { $0 != "/" && $0 != "?" }
        let hostAndPort = authority.split(separator: "@", omittingEmptySubsequences: false).last ?? ""
        let hasHost = !hostAndPort.isEmpty && !hostAndPort.hasPrefix(":")
        return hasHost && !rest.unicodeScalars.contains { $0.value < 0x21 || $0.value == 0x7F }
    }
}
