public import Conversation
import Foundation

/// A destination's OAuth2 block, checked once: which grant, which endpoints, how
/// the client authenticates, what counts as a challenge, and how request URLs
/// map to the storage URL a token is filed under (the seed's scope key).
public struct OAuth2Settings: Sendable, Equatable {
    public enum Grant: String, Sendable, CaseIterable {
        case authorizationCode = "authorization_code", clientCredentials = "client_credentials", password
        /// Propagation: RFC 8693 token exchange and RFC 7523 JWT bearer, for a verified user.
        case tokenExchange = "token_exchange", jwtBearer = "jwt_bearer"
        /// Propagation: RFC 7522 SAML 2.0 bearer, an assertion Parley issues and signs.
        case saml2Bearer = "saml2_bearer"
    }

    /// How a propagation grant turns the registration's verified user into a token.
    public struct Propagation: Sendable, Equatable {
        /// The JWT a `jwt_bearer` grant sends as `assertion`.
        public enum Assertion: String, Sendable, CaseIterable {
            /// The registration's identity token, as the client sent it.
            case identityToken = "identity_token"
            /// A JWT Parley issues and signs for the user (`PARLEY_SIGNING_KEYS`).
            case parley
        }

        /// RFC 8693 `audience` and `resource` (token exchange only).
        public let audience: String?
        public let resource: String?
        /// RFC 8693 `subject_token_type` of the identity token.
        public let subjectTokenType: String
        public let assertion: Assertion
        /// The `aud` of Parley's assertion: the token endpoint unless configured.
        public let assertionAudience: String
        /// The claim of the identity token that Parley's assertion names as `sub`.
        public let subjectClaim: String
        /// `saml2_bearer`: the assertion's `Audience`, `NameID` format and the claim it names.
        public let samlAudience: String
        public let nameIdFormat: String
        public let nameIdClaim: String

        /// The token types RFC 8693 names for a JWT a client may hold, by their short names.
        public static let subjectTokenTypes: [String: String] = [
            "jwt": "urn:ietf:params:oauth:token-type:jwt",
            "id_token": "urn:ietf:params:oauth:token-type:id_token",
            "access_token": "urn:ietf:params:oauth:token-type:access_token",
        ]
        public static let tokenExchangeGrantType = "urn:ietf:params:oauth:grant-type:token-exchange"
        public static let jwtBearerGrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
        public static let saml2BearerGrantType = "urn:ietf:params:oauth:grant-type:saml2-bearer"
        public static let unspecifiedNameIDFormat = "urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified"
    }
    public enum ClientAuthentication: String, Sendable { case basic = "client_secret_basic", post = "client_secret_post" }

    public struct Invalid: Error { public let problems: [String] }

    /// The `prompt` parameter of a destination's authorization requests.
    public enum Prompt: Sendable, Equatable {
        /// `prompt=login` for a registration without a verified user, so a session at the
        /// authorization server never completes its flow unseen; none for a verified user (the default).
        case loginUnlessVerified
        /// What `oauth2.prompt` says, for every registration; nil (`""` in the file) sends none.
        case always(String?)

        /// The value to send for a registration whose user is, or is not, verified; nil sends none.
        public func value(verifiedUser: Bool) -> String? {
            switch self {
            case .loginUnlessVerified: verifiedUser ? nil : "login"
            case .always(let value): value
            }
        }

        /// An OpenID Connect `prompt`: space-separated values of letters, digits, `_` and `-`
        /// (`login`, `consent`, `select_account`, …), at most 100 bytes; or empty.
        static func isValid(_ text: String) -> Bool {
            guard text.utf8.count <= 100 else { return false }
            if text.isEmpty { return true }
            func isWordByte(_ b: UInt8) -> Bool {
                switch b {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default: false
                }
            }
            return text.split(separator: " ", omittingEmptySubsequences: false).allSatisfy { !$0.isEmpty && $0.utf8.allSatisfy(isWordByte) }
        }
    }

    public let destination: String
    public let grant: Grant
    public let authorizationEndpoint: String?
    public let tokenEndpoint: String
    public let revocationEndpoint: String?
    public let clientID: String
    public let clientSecret: String?
    public let clientAuthentication: ClientAuthentication
    /// The scopes every request names; `openid` among them when the destination reads who
    /// signed in (`jwksUri` or `userinfoEndpoint`), added when the file does not list it.
    public let scopes: [String]
    public let challengeStatuses: Set<Int>
    public let sapStatusHeader: Bool
    /// Longest prefix first.
    public let scopeKeyRules: [(prefix: String, key: String)]
    public let defaultScopeKey: String
    /// OpenID Connect (authorization code only): the authorization server's issuer, the `iss` of
    /// its `id_token`s and the issuer of every identity it vouches for (default: the token
    /// endpoint's origin, for userinfo alone); where its `id_token` keys are; its userinfo endpoint.
    public let issuer: String?
    public let jwksURI: String?
    public let userinfoEndpoint: String?
    /// The `prompt` of authorization requests (`oauth2.prompt`).
    public let prompt: Prompt
    /// How a propagation grant speaks for the user; nil for the other grants.
    public let propagation: Propagation?

    /// Whether an authorization-code flow of this destination learns who signed in: from the
    /// `id_token` (`jwksUri`), else from the userinfo endpoint.
    public var yieldsIdentity: Bool { jwksURI != nil || userinfoEndpoint != nil }

    /// Who vouches for the identities this destination's flows yield: `issuer`, else the token
    /// endpoint's origin.
    public var identityIssuer: String { issuer ?? URLParts(tokenEndpoint)?.origin ?? tokenEndpoint }

    public static func == (a: OAuth2Settings, b: OAuth2Settings) -> Bool {
        a.destination == b.destination && a.tokenEndpoint == b.tokenEndpoint && a.clientID == b.clientID
    }

    /// Checks a destination's `oauth2` block; every problem is reported at once.
    public init(spec o: DestinationSpec.OAuth2, destination name: String, baseURL: String) throws(Invalid) {
        var problems: [String] = []
        let prefix = "destination '\(name)': oauth2."
        let grant = Grant(rawValue: o.grant ?? "authorization_code")
        if grant == nil {
            problems.append(prefix + "grant must be authorization_code, client_credentials, password, token_exchange, jwt_bearer or saml2_bearer")
        }
        let auth = ClientAuthentication(rawValue: o.clientAuthentication ?? "client_secret_basic")
        if auth == nil { problems.append(prefix + "clientAuthentication must be client_secret_basic or client_secret_post") }
        func checkURL(_ name: String, _ value: String?, required: Bool) {
            guard let value else {
                if required { problems.append(prefix + "\(name) is required") }
                return
            }
            if URLParts(value) == nil { problems.append(prefix + "\(name) must be an absolute http(s) URL") }
        }
        checkURL("tokenEndpoint", o.tokenEndpoint, required: true)
        checkURL("authorizationEndpoint", o.authorizationEndpoint, required: grant == .authorizationCode)
        checkURL("revocationEndpoint", o.revocationEndpoint, required: false)
        checkURL("issuer", o.issuer, required: o.jwksUri != nil)
        checkURL("jwksUri", o.jwksUri, required: false)
        checkURL("userinfoEndpoint", o.userinfoEndpoint, required: false)
        if grant != nil, grant != .authorizationCode, o.issuer != nil || o.jwksUri != nil || o.userinfoEndpoint != nil {
            problems.append(prefix + "issuer, jwksUri and userinfoEndpoint name who signed in, which only the authorization_code grant reads")
        }
        if let prompt = o.prompt {
            if grant != nil, grant != .authorizationCode {
                problems.append(prefix + "prompt is sent with authorization requests, which only the authorization_code grant makes")
            } else if !Prompt.isValid(prompt) {
                problems.append(prefix + "prompt must be space-separated values of letters, digits, '_' and '-' (at most 100 bytes), or empty")
            }
        }
        let propagation = Self.propagation(o, grant: grant, prefix: prefix, problems: &problems)
        if (o.clientId ?? "").isEmpty { problems.append(prefix + "clientId is required") }
        if grant == .clientCredentials && o.clientSecret == nil { problems.append(prefix + "client_credentials needs clientSecret") }
        for rule in o.scopeKeys ?? [] where URLParts(rule.key) == nil {
            problems.append(prefix + "scopeKeys key '\(rule.key)' must be an absolute URL")
        }
        let statuses = o.challenge?.statuses ?? [401]
        if statuses.contains(where: { !(400...599).contains($0) }) { problems.append(prefix + "challenge.statuses must be 4xx or 5xx") }
        guard problems.isEmpty, let grant, let auth, let tokenEndpoint = o.tokenEndpoint, let clientID = o.clientId else {
            throw Invalid(problems: problems)
        }
        self.destination = name
        self.grant = grant
        self.authorizationEndpoint = o.authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = o.revocationEndpoint
        self.clientID = clientID
        self.clientSecret = o.clientSecret
        self.clientAuthentication = auth
        let scopes = o.scopes ?? []
        let openID = o.jwksUri != nil || o.userinfoEndpoint != nil
        self.scopes = openID && !scopes.contains("openid") ? ["openid"] + scopes : scopes
        self.challengeStatuses = Set(statuses)
        self.sapStatusHeader = o.challenge?.sapStatusHeader ?? true
        self.scopeKeyRules = (o.scopeKeys ?? []).map { ($0.prefix, $0.key) }.sorted { $0.prefix.count > $1.prefix.count }
        self.defaultScopeKey = baseURL
        self.issuer = o.issuer
        self.jwksURI = o.jwksUri
        self.userinfoEndpoint = o.userinfoEndpoint
        self.prompt = o.prompt.map { .always($0.isEmpty ? nil : $0) } ?? .loginUnlessVerified
        self.propagation = propagation
    }

    /// The propagation fields, checked: only a propagation grant takes them, and each only where it applies.
    private static func propagation(
        _ o: DestinationSpec.OAuth2, grant: Grant?, prefix: String, problems: inout [String]
    ) -> Propagation? {
        let exchangeOnly: [(String, String?)] = [("audience", o.audience), ("resource", o.resource), ("subjectTokenType", o.subjectTokenType)]
        let bearerOnly: [(String, String?)] = [("assertion", o.assertion), ("assertionAudience", o.assertionAudience), ("subjectClaim", o.subjectClaim)]
        for (name, value) in exchangeOnly where value != nil && grant != .tokenExchange {
            problems.append(prefix + "\(name) is read by the token_exchange grant only")
        }
        for (name, value) in bearerOnly where value != nil && grant != .jwtBearer {
            problems.append(prefix + "\(name) is read by the jwt_bearer grant only")
        }
        let samlOnly: [(String, String?)] = [("samlAudience", o.samlAudience), ("nameIdFormat", o.nameIdFormat), ("nameIdClaim", o.nameIdClaim)]
        for (name, value) in samlOnly where value != nil && grant != .saml2Bearer {
            problems.append(prefix + "\(name) is read by the saml2_bearer grant only")
        }
        guard let grant, grant == .tokenExchange || grant == .jwtBearer || grant == .saml2Bearer else { return nil }
        if grant == .saml2Bearer {
            if (o.samlAudience ?? "").isEmpty || (o.samlAudience?.utf8.count ?? 0) > 1024 {
                problems.append(prefix + "saml2_bearer needs samlAudience (the authorization server's entity id, at most 1024 bytes)")
            }
            if let format = o.nameIdFormat, format.isEmpty || format.utf8.count > 1024 {
                problems.append(prefix + "nameIdFormat must be 1 to 1024 bytes")
            }
            if let claim = o.nameIdClaim, claim.isEmpty || claim.utf8.count > 200 {
                problems.append(prefix + "nameIdClaim must be a claim name of 1 to 200 bytes")
            }
        }
        if let audience = o.audience, audience.isEmpty || audience.utf8.count > 2000 {
            problems.append(prefix + "audience must be 1 to 2000 bytes")
        }
        if let resource = o.resource, URLParts(resource) == nil { problems.append(prefix + "resource must be an absolute http(s) URL") }
        var tokenType = Propagation.subjectTokenTypes["jwt"] ?? ""
        if let named = o.subjectTokenType {
            if let full = Propagation.subjectTokenTypes[named] {
                tokenType = full
            } else if Propagation.subjectTokenTypes.values.contains(named) {
                tokenType = named
            } else {
                problems.append(prefix + "subjectTokenType must be jwt, id_token or access_token (or its urn:ietf:params:oauth:token-type: name)")
            }
        }
        let assertion = Propagation.Assertion(rawValue: o.assertion ?? "identity_token")
        if assertion == nil { problems.append(prefix + "assertion must be identity_token or parley") }
        if let audience = o.assertionAudience, audience.isEmpty || audience.utf8.count > 2000 {
            problems.append(prefix + "assertionAudience must be 1 to 2000 bytes")
        }
        if grant == .jwtBearer, assertion == .identityToken, o.assertionAudience != nil || o.subjectClaim != nil {
            problems.append(prefix + "assertionAudience and subjectClaim shape Parley's own assertion (assertion: parley)")
        }
        if let claim = o.subjectClaim, claim.isEmpty || claim.utf8.count > 200 {
            problems.append(prefix + "subjectClaim must be a claim name of 1 to 200 bytes")
        }
        return Propagation(
            audience: o.audience, resource: o.resource, subjectTokenType: tokenType, assertion: assertion ?? .identityToken,
            assertionAudience: o.assertionAudience ?? o.tokenEndpoint ?? "", subjectClaim: o.subjectClaim ?? "sub",
            samlAudience: o.samlAudience ?? "", nameIdFormat: o.nameIdFormat ?? Propagation.unspecifiedNameIDFormat,
            nameIdClaim: o.nameIdClaim ?? "sub")
    }

    /// The storage URL for a request URL (seed: `transformRequestURLToStorageURL`):
    /// the longest matching prefix rule, else the destination URL.
    public func scopeKey(for url: String) -> String {
        for rule in scopeKeyRules where url.hasPrefix(rule.prefix) {
            let rest = url.dropFirst(rule.prefix.count)
            if rest.isEmpty || rest.hasPrefix("/") || rest.hasPrefix("?") || rule.prefix.hasSuffix("/") { return rule.key }
        }
        return defaultScopeKey
    }

    /// Whether a response is an OAuth2 challenge: a configured status, or `400` with
    /// `X-SMP-AUTHENTICATION-STATUS: 1000` when the SAP style is on.
    public func isChallenge(_ response: UpstreamResponse) -> Bool {
        if challengeStatuses.contains(response.status) { return true }
        return sapStatusHeader && response.status == 400 && response.headers["X-SMP-AUTHENTICATION-STATUS"] == "1000"
    }

    /// Client-credentials tokens belong to the destination; the others to the registration.
    public var tokensBelongToDestination: Bool { grant == .clientCredentials }
}
