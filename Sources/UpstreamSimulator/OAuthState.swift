import ParleyEncoding
import ParleyCrypto
import Synchronization

/// An OAuth2 error answer (RFC 6749 §5.2): `invalid_client` is `401`, the others `400`.
struct OAuthError: Error, Sendable {
    enum Code: String, Sendable {
        case invalidRequest = "invalid_request"
        case invalidClient = "invalid_client"
        case invalidGrant = "invalid_grant"
        case unauthorizedClient = "unauthorized_client"
        case unsupportedGrantType = "unsupported_grant_type"
    }

    let code: Code
    let description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

/// The subject, client and scope a token request was granted for; `grantID` ties together
/// every token descended from one authorization (code, login or client credentials).
struct OAuthGrant: Sendable {
    let clientID: String
    let subject: String
    let scope: String?
    let grantID: String
    /// The authorization request's OpenID Connect `nonce`, echoed in the `id_token`.
    var nonce: String? = nil
    /// When the person authenticated (the login that made the session), seconds since 1970: the
    /// `id_token`'s `auth_time`.
    var authTime: Int? = nil
    /// What a token exchange (RFC 8693) asked the token for (`audience`, else `resource`), and
    /// which propagation grant brought it: the resource endpoints echo both.
    var audience: String? = nil
    var propagatedBy: String? = nil

    /// Whether the grant asked for OpenID Connect (`openid` among its scopes).
    var isOpenID: Bool { (scope ?? "").split(separator: " ").contains("openid") }
}

struct IssuedTokens: Sendable {
    let accessToken: String
    let refreshToken: String?
    let expiresIn: Int
    let scope: String?
    /// The OpenID Connect `id_token`, for an authorization code granted with `openid`.
    var idToken: String? = nil
}

/// What a valid access token stands for.
public struct OAuthAccess: Sendable, Equatable {
    public let clientID: String
    public let subject: String
    public let scope: String?
    public var audience: String? = nil
    public var propagatedBy: String? = nil
}

/// A failure `POST /sim/oauth/fail-token` arranged for the token endpoint.
struct InjectedTokenFailure: Sendable {
    let status: Int
    let retryAfter: Int?
    let error: String
}

/// Codes, tokens, test controls and counters of the simulated OAuth2 authorization server.
public final class OAuthState: Sendable {
    private let data = Mutex(Data())
    /// The `id_token` signing keys, made on first use (RSA key generation takes a moment).
    private let signer = Mutex<IdentityIssuer?>(nil)

    init() {}

    /// The JWK Set whose keys the authorization server trusts for JWT bearer assertions besides
    /// the demo identity provider's (`POST /sim/oauth/trust-jwks`: an administrator trusting
    /// Parley's `/.well-known/jwks.json`).
    private let trusted = Mutex<[UInt8]?>(nil)

    public var trustedAssertionKeys: [UInt8]? {
        get { trusted.withLock { $0 } }
        set { trusted.withLock { $0 = newValue } }
    }

    /// The certificates (PEM) whose keys the authorization server trusts for SAML bearer
    /// assertions (`POST /sim/oauth/trust-saml-metadata`: an administrator importing Parley's
    /// `/.well-known/saml-metadata.xml`).
    private let trustedSAML = Mutex<[String]>([])

    public var trustedSAMLCertificates: [String] {
        get { trustedSAML.withLock { $0 } }
        set { trustedSAML.withLock { $0 = newValue } }
    }

    /// The last assertion each propagation grant brought (JWT text, or SAML XML), whether
    /// accepted or not: tests hand them to other implementations to check.
    private let assertions = Mutex<[String: String]>([:])

    public func lastAssertion(grant: String) -> String? { assertions.withLock { $0[grant] } }

    func noteAssertion(_ assertion: String, grant: String) { assertions.withLock { $0[grant] = assertion } }

    /// A tap on the token endpoint: each request's headers and body as text (the last 500), so a
    /// test can say what was, and was never, sent to the authorization server.
    private let tapped = Mutex<[String]>([])

    public var tokenRequests: [String] { tapped.withLock { $0 } }

    func tap(_ text: String) {
        tapped.withLock { list in
            if list.count >= 500 { list.removeFirst() }
            list.append(text)
        }
    }

    /// The `jti`s of accepted JWT bearer assertions: one is never accepted twice (RFC 7523 §3 item 7).
    private let seenAssertions = Mutex<Set<String>>([])

    /// Records `jti`; false when it was seen before.
    func firstUse(ofAssertion jti: String) -> Bool { seenAssertions.withLock { $0.insert(jti).inserted } }

    /// The keys the authorization server signs `id_token`s with (RS256, `kid` `sim-rsa-1`) and
    /// publishes at `GET /oauth/jwks`; nil only when key generation failed.
    public var identityIssuer: IdentityIssuer? {
        signer.withLock { signer in
            if signer == nil { signer = try? IdentityIssuer() }
            return signer
        }
    }

    // MARK: Counters

    /// Token-endpoint calls by `grant_type` as sent (`"none"` when absent), failed ones included.
    public var tokenCallsByGrant: [String: Int] { data.withLock { $0.tokenCallsByGrant } }
    public func tokenCalls(grant: String) -> Int { data.withLock { $0.tokenCallsByGrant[grant, default: 0] } }
    public var tokenCalls: Int { data.withLock { $0.tokenCallsByGrant.values.reduce(0, +) } }
    /// Token-endpoint error answers by `error` code (injected failures count as `injected_<status>`).
    public var tokenErrorsByCode: [String: Int] { data.withLock { $0.tokenErrorsByCode } }
    /// Authenticated `POST /oauth/revoke` calls by `token_type_hint` (`"none"` when absent).
    public var revocationsByHint: [String: Int] { data.withLock { $0.revocationsByHint } }
    public func revocations(hint: String) -> Int { data.withLock { $0.revocationsByHint[hint, default: 0] } }
    /// Calls of the protected resources by kind (`"oauth-api"`, `"sap-api"`), and those refused.
    public var resourceCalls: [String: Int] { data.withLock { $0.resourceCalls } }
    public var resourceRejections: [String: Int] { data.withLock { $0.resourceRejections } }
    /// Login pages shown, logins that issued a code, and logins refused.
    public var authorizePages: Int { data.withLock { $0.authorizePages } }
    public var authorizeLogins: Int { data.withLock { $0.authorizeLogins } }
    public var authorizeFailures: Int { data.withLock { $0.authorizeFailures } }
    public var accessTokensIssued: Int { data.withLock { $0.accessTokensIssued } }
    /// Every access, refresh and `id_token` value issued so far (tests grep for leaks with them).
    public var issuedTokenValues: [String] {
        data.withLock { Array($0.accessTokens.keys) + Array($0.refreshTokens.keys) + $0.idTokens }
    }
    /// Authorization requests answered with a code at once from a login session (no login page).
    public var silentAuthorizations: Int { data.withLock { $0.silentAuthorizations } }
    /// `id_token`s issued, and calls of `/oauth/userinfo` (those refused among them).
    public var idTokensIssued: Int { data.withLock { $0.idTokens.count } }
    public var userinfoCalls: Int { data.withLock { $0.userinfoCalls } }
    public var userinfoRejections: Int { data.withLock { $0.userinfoRejections } }
    /// Login sessions alive (one per successful login, until `/sim/sessions/expire`).
    public var loginSessions: Int { data.withLock { $0.sessions.count } }
    public var refreshTokensIssued: Int { data.withLock { $0.refreshTokensIssued } }

    // MARK: Test controls

    /// Every access token issued so far is expired from now on.
    public func expireAccessTokens() {
        data.withLock { data in
            for key in data.accessTokens.keys { data.accessTokens[key]?.expired = true }
        }
    }

    /// Every refresh token issued so far stops working.
    public func revokeRefreshTokens() {
        data.withLock { data in
            for key in data.refreshTokens.keys { data.refreshTokens[key]?.active = false }
        }
    }

    /// Every login session ends: the next authorization request shows the login page again.
    public func expireSessions() {
        data.withLock { $0.sessions.removeAll() }
    }

    /// The next `count` token-endpoint calls answer `status` (with `Retry-After` when given).
    public func failNextTokenCalls(count: Int, status: Int = 503, retryAfter: Int? = nil, error: String = "temporarily_unavailable") {
        data.withLock { data in
            data.pendingFailures = count
            data.failure = InjectedTokenFailure(status: status, retryAfter: retryAfter, error: error)
        }
    }

    /// The token endpoint waits this long before answering.
    public func setTokenDelay(_ delay: Duration) {
        data.withLock { $0.tokenDelay = delay }
    }

    /// The access token's grant if it is known, unrevoked and unexpired.
    public func validate(accessToken token: String, now: ContinuousClock.Instant = .now) -> OAuthAccess? {
        data.withLock { data in
            guard let record = data.accessTokens[token], !record.expired, now < record.expires else { return nil }
            return OAuthAccess(
                clientID: record.grant.clientID, subject: record.grant.subject, scope: record.grant.scope, audience: record.grant.audience,
                propagatedBy: record.grant.propagatedBy)
        }
    }

    /// Whether the refresh token would be accepted now.
    public func isActive(refreshToken token: String) -> Bool {
        data.withLock { $0.refreshTokens[token]?.active ?? false }
    }

    // MARK: Internal

    func countAuthorizePage() { data.withLock { $0.authorizePages += 1 } }

    func countSilentAuthorization() { data.withLock { $0.silentAuthorizations += 1 } }

    func countUserinfo(rejected: Bool) {
        data.withLock { data in
            data.userinfoCalls += 1
            if rejected { data.userinfoRejections += 1 }
        }
    }

    /// A new login session for `subject`; its value goes into the `AS_SESSION` cookie.
    func startSession(subject: String, authTime: Int) -> String {
        let value = "ass_" + SecureRandom.token()
        data.withLock { $0.sessions[value] = LoginSession(subject: subject, authTime: authTime) }
        return value
    }

    /// Who the login session `value` belongs to, and when they logged in, while it lives.
    func session(_ value: String) -> LoginSession? {
        data.withLock { $0.sessions[value] }
    }

    /// A login session: who, and when they authenticated.
    struct LoginSession: Sendable {
        let subject: String
        let authTime: Int
    }

    /// An authorization server that answers from its login session even when the client asks for a
    /// fresh login (`prompt=login`, `max_age`), as some do: the `id_token`'s `auth_time` then shows
    /// the old login (tests of step-up's `auth_time` check).
    public var ignoresFreshLoginRequests: Bool {
        get { data.withLock { $0.ignoresFreshLoginRequests } }
        set { data.withLock { $0.ignoresFreshLoginRequests = newValue } }
    }

    /// Makes every login session's authentication `seconds` older (a login long ago).
    public func ageSessions(by seconds: Int) {
        data.withLock { data in
            for (key, session) in data.sessions { data.sessions[key] = LoginSession(subject: session.subject, authTime: session.authTime - seconds) }
        }
    }

    func recordIDToken(_ token: String) { data.withLock { $0.idTokens.append(token) } }

    func countLogin(success: Bool) {
        data.withLock { data in
            if success { data.authorizeLogins += 1 } else { data.authorizeFailures += 1 }
        }
    }

    /// Counts a token call and says how long to wait and whether to fail it.
    func beginTokenCall(grant: String) -> (delay: Duration, failure: InjectedTokenFailure?) {
        data.withLock { data in
            data.tokenCallsByGrant[grant, default: 0] += 1
            var failure: InjectedTokenFailure?
            if data.pendingFailures > 0, let injected = data.failure {
                data.pendingFailures -= 1
                data.tokenErrorsByCode["injected_\(injected.status)", default: 0] += 1
                failure = injected
            }
            return (data.tokenDelay, failure)
        }
    }

    func countTokenError(_ code: OAuthError.Code) {
        data.withLock { $0.tokenErrorsByCode[code.rawValue, default: 0] += 1 }
    }

    func countRevocation(hint: String) {
        data.withLock { $0.revocationsByHint[hint, default: 0] += 1 }
    }

    func countResource(_ kind: String, rejected: Bool) {
        data.withLock { data in
            data.resourceCalls[kind, default: 0] += 1
            if rejected { data.resourceRejections[kind, default: 0] += 1 }
        }
    }

    func issueCode(_ code: PendingCode) -> String {
        let value = "code_" + SecureRandom.token()
        data.withLock { $0.codes[value] = code }
        return value
    }

    /// Redeems a code once. A second use fails and revokes what the first one issued (RFC 6749 §4.1.2).
    func redeemCode(
        _ value: String, clientID: String, redirectURI: String?, verifier: String?, now: ContinuousClock.Instant
    ) -> Result<OAuthGrant, OAuthError> {
        data.withLock { data in
            guard var code = data.codes[value], code.grant.clientID == clientID else {
                return .failure(OAuthError(.invalidGrant, "unknown authorization code"))
            }
            if code.used {
                data.revokeGrant(code.grant.grantID)
                return .failure(OAuthError(.invalidGrant, "authorization code already used"))
            }
            code.used = true
            data.codes[value] = code
            guard now < code.expires else { return .failure(OAuthError(.invalidGrant, "authorization code expired")) }
            if let expected = code.redirectURI, expected != redirectURI {
                return .failure(OAuthError(.invalidGrant, "redirect_uri does not match the authorization request"))
            }
            switch (code.codeChallenge, verifier) {
            case (nil, nil):
                break
            case (nil, .some):
                return .failure(OAuthError(.invalidGrant, "code_verifier without a code_challenge"))
            case (.some, nil):
                return .failure(OAuthError(.invalidGrant, "code_verifier missing"))
            case (.some(let challenge), .some(let verifier)):
                guard PKCE.isWellFormed(verifier: verifier),
                    SimHTTP.secretsMatch(PKCE.challenge(for: verifier), challenge)
                else { return .failure(OAuthError(.invalidGrant, "code_verifier does not match the code_challenge")) }
            }
            return .success(code.grant)
        }
    }

    /// Rotates a refresh token: the old one stops working, the grant carries on.
    func redeemRefreshToken(_ value: String, clientID: String) -> Result<OAuthGrant, OAuthError> {
        data.withLock { data in
            guard let record = data.refreshTokens[value], record.grant.clientID == clientID, record.active else {
                return .failure(OAuthError(.invalidGrant, "refresh token unknown, revoked or already used"))
            }
            data.refreshTokens[value]?.active = false
            return .success(record.grant)
        }
    }

    func issueTokens(
        for grant: OAuthGrant, withRefreshToken: Bool, lifetime: Duration, now: ContinuousClock.Instant
    ) -> IssuedTokens {
        let access = "at_" + SecureRandom.token()
        let refresh = withRefreshToken ? "rt_" + SecureRandom.token() : nil
        data.withLock { data in
            data.accessTokens[access] = AccessRecord(grant: grant, expires: now.advanced(by: lifetime))
            data.accessTokensIssued += 1
            if let refresh {
                data.refreshTokens[refresh] = RefreshRecord(grant: grant)
                data.refreshTokensIssued += 1
            }
        }
        let (seconds, attoseconds) = lifetime.components
        return IssuedTokens(
            accessToken: access, refreshToken: refresh, expiresIn: Int(seconds) + (attoseconds > 0 ? 1 : 0), scope: grant.scope)
    }

    /// RFC 7009: revokes the client's token; a refresh token takes its grant's access tokens along.
    /// Unknown tokens and other clients' tokens are ignored.
    func revoke(token: String, clientID: String) {
        data.withLock { data in
            if let record = data.accessTokens[token], record.grant.clientID == clientID {
                data.accessTokens[token]?.expired = true
            }
            if let record = data.refreshTokens[token], record.grant.clientID == clientID {
                data.revokeGrant(record.grant.grantID)
            }
        }
    }

    var snapshot: SimulatorStats.OAuth {
        data.withLock { data in
            SimulatorStats.OAuth(
                tokenCallsByGrant: data.tokenCallsByGrant,
                tokenErrorsByCode: data.tokenErrorsByCode,
                revocationsByHint: data.revocationsByHint,
                resourceCalls: data.resourceCalls,
                resourceRejections: data.resourceRejections,
                authorizePages: data.authorizePages,
                authorizeLogins: data.authorizeLogins,
                authorizeFailures: data.authorizeFailures,
                accessTokensIssued: data.accessTokensIssued,
                refreshTokensIssued: data.refreshTokensIssued,
                silentAuthorizations: data.silentAuthorizations,
                idTokensIssued: data.idTokens.count,
                userinfoCalls: data.userinfoCalls
            )
        }
    }

    struct PendingCode: Sendable {
        let grant: OAuthGrant
        /// The `redirect_uri` the authorization request carried (must come back at the token endpoint).
        let redirectURI: String?
        let codeChallenge: String?
        let expires: ContinuousClock.Instant
        var used = false
    }

    private struct AccessRecord {
        let grant: OAuthGrant
        let expires: ContinuousClock.Instant
        var expired = false
    }

    private struct RefreshRecord {
        let grant: OAuthGrant
        var active = true
    }

    private struct Data {
        var codes: [String: PendingCode] = [:]
        var accessTokens: [String: AccessRecord] = [:]
        var refreshTokens: [String: RefreshRecord] = [:]
        var tokenCallsByGrant: [String: Int] = [:]
        var tokenErrorsByCode: [String: Int] = [:]
        var revocationsByHint: [String: Int] = [:]
        var resourceCalls: [String: Int] = [:]
        var resourceRejections: [String: Int] = [:]
        var authorizePages = 0
        var authorizeLogins = 0
        var authorizeFailures = 0
        var accessTokensIssued = 0
        var refreshTokensIssued = 0
        var pendingFailures = 0
        var failure: InjectedTokenFailure?
        var tokenDelay: Duration = .zero
        /// Login sessions: `AS_SESSION` value → who and when.
        var sessions: [String: LoginSession] = [:]
        var ignoresFreshLoginRequests = false
        var idTokens: [String] = []
        var silentAuthorizations = 0
        var userinfoCalls = 0
        var userinfoRejections = 0

        mutating func revokeGrant(_ grantID: String) {
            for (key, record) in accessTokens where record.grant.grantID == grantID { accessTokens[key]?.expired = true }
            for (key, record) in refreshTokens where record.grant.grantID == grantID { refreshTokens[key]?.active = false }
        }
    }
}

/// RFC 7636 S256.
enum PKCE {
    static func challenge(for verifier: String) -> String {
        Base64URL.encode(SHA256.hash(Array(verifier.utf8)))
    }

    /// 43…128 characters of `[A-Z a-z 0-9 - . _ ~]`.
    static func isWellFormed(verifier: String) -> Bool {
        let bytes = Array(verifier.utf8)
        guard (43...128).contains(bytes.count) else { return false }
        return bytes.allSatisfy { b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x2E
                || b == 0x5F || b == 0x7E
        }
    }
}
