public import Conversation
import Foundation

/// A destination's OAuth2 block, checked once: which grant, which endpoints, how
/// the client authenticates, what counts as a challenge, and how request URLs
/// map to the storage URL a token is filed under (the seed's scope key).
public struct OAuth2Settings: Sendable, Equatable {
    public enum Grant: String, Sendable { case authorizationCode = "authorization_code", clientCredentials = "client_credentials", password }
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
        if grant == nil { problems.append(prefix + "grant must be authorization_code, client_credentials or password") }
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
