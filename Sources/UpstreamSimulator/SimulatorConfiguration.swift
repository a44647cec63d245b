/// How the simulated SMP behaves. Defaults match the demo and the tests.
public struct SimulatorConfiguration: Sendable, Equatable {
    /// Credentials `GET /api/data` accepts with HTTP Basic (also the IdP's and `/basic-otp`'s one user).
    public var basicUsername: String
    public var basicPassword: String
    /// Realm in `WWW-Authenticate: Basic realm="…"`.
    public var basicRealm: String
    /// Upper bound for `GET /files/big?mb=N`.
    public var maxBigFileMiB: Int
    /// Upper bound for `GET /slow?ms=N`.
    public var maxSlowMilliseconds: Int
    /// Clients of the OAuth2 authorization server.
    public var oauthClients: [OAuthClient]
    /// Who else may sign in at the OAuth2 authorization server besides the Basic user (who always
    /// may): by default `bob` / `builder`, so a test has a second person.
    public var oauthUsers: [SimulatorUser]
    /// The authorization server's OpenID Connect issuer (the `iss` of its `id_token`s); nil means
    /// `http://127.0.0.1:<bound port>`.
    public var oauthIssuer: String?
    /// How long an access token is valid (`expires_in` rounds it up to whole seconds).
    public var accessTokenLifetime: Duration
    /// How the `/sp` service provider challenges, whether it names itself, its second factor, and
    /// how the session cookies of `/sp` and `/basic-otp` are scoped (the start values;
    /// `POST /control/sp` changes them at run time).
    public var samlBinding: SAMLBinding
    public var samlIdentifyingHeader: Bool
    public var spOTP: SPOTPMode
    public var spCookieScope: SPCookieScope
    public var spCookieDomain: Bool
    /// ACS URLs the mock IdP accepts in an AuthnRequest (the start list; `POST /control/saml/acs` replaces it).
    public var samlACSURLs: [String]
    /// Where browsers reach the mock IdP; nil means `http://127.0.0.1:<bound port>`.
    public var idpBaseURL: String?
    /// How long the IdP's assertions are valid (`NotOnOrAfter`); `.zero` makes them arrive expired.
    public var samlAssertionLifetime: Duration

    public init(
        basicUsername: String = "alice",
        basicPassword: String = "wonderland",
        basicRealm: String = "smp",
        maxBigFileMiB: Int = 8192,
        maxSlowMilliseconds: Int = 600_000,
        oauthClients: [OAuthClient] = OAuthClient.defaults,
        oauthUsers: [SimulatorUser] = SimulatorUser.defaultOAuthUsers,
        oauthIssuer: String? = nil,
        accessTokenLifetime: Duration = .seconds(3600),
        samlBinding: SAMLBinding = .postForm,
        samlIdentifyingHeader: Bool = true,
        spOTP: SPOTPMode = .off,
        spCookieScope: SPCookieScope = .mount,
        spCookieDomain: Bool = false,
        samlACSURLs: [String] = [],
        idpBaseURL: String? = nil,
        samlAssertionLifetime: Duration = .seconds(300)
    ) {
        self.basicUsername = basicUsername
        self.basicPassword = basicPassword
        self.basicRealm = basicRealm
        self.maxBigFileMiB = maxBigFileMiB
        self.maxSlowMilliseconds = maxSlowMilliseconds
        self.oauthClients = oauthClients
        self.oauthUsers = oauthUsers
        self.oauthIssuer = oauthIssuer
        self.accessTokenLifetime = accessTokenLifetime
        self.samlBinding = samlBinding
        self.samlIdentifyingHeader = samlIdentifyingHeader
        self.spOTP = spOTP
        self.spCookieScope = spCookieScope
        self.spCookieDomain = spCookieDomain
        self.samlACSURLs = samlACSURLs
        self.idpBaseURL = idpBaseURL
        self.samlAssertionLifetime = samlAssertionLifetime
    }

    /// The `/sp` settings this configuration starts with.
    public var spSettings: SPSettings {
        SPSettings(
            binding: samlBinding, identifyingHeader: samlIdentifyingHeader, otp: spOTP, cookieScope: spCookieScope,
            cookieDomain: spCookieDomain)
    }
}

/// A person who can sign in (name and password).
public struct SimulatorUser: Sendable, Equatable {
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    /// The OAuth2 authorization server's second person.
    public static let defaultOAuthUsers = [SimulatorUser(username: "bob", password: "builder")]
}

/// How the `/sp` service provider sends the browser to the IdP.
public enum SAMLBinding: String, Sendable, Codable, CaseIterable {
    /// `200 text/html` with a form that posts `SAMLRequest` and `RelayState` to the IdP.
    case postForm
    /// `302` to the IdP with `SAMLRequest` and `RelayState` in the query.
    case redirect
}

/// The second factor of the `/sp` service provider.
public enum SPOTPMode: String, Sendable, Codable, CaseIterable {
    case off
    /// A one-time passcode after the SAML login, before any protected resource.
    case afterSAML
    /// A one-time passcode after the SAML login for the SMP registration endpoint only
    /// (`POST …/Connections`): a second factor before a device is registered, as SMP can be set up.
    case forRegistration
}

/// Which `Path` the session cookies of `/sp` (`SP_SESSION`) and `/basic-otp` (`BO_SESSION`) get.
///
/// Real service providers behind a reverse proxy differ here, and a proxy such as Parley's
/// `/web/{destination}/…` has to work with each: some scope the cookie to where they are mounted
/// on their own server and leave the proxy to cope, others honour `X-Forwarded-Prefix` for the
/// cookie as they do for URLs (Werkzeug's `ProxyFix(x_prefix=1)`, Spring's
/// `ForwardedHeaderFilter` with Tomcat scoping the session cookie to the context path,
/// ASP.NET's `UsePathBase`, SAP Web Dispatcher).
public enum SPCookieScope: String, Sendable, Codable, CaseIterable {
    /// `Path=/sp` (or `/basic-otp`), whatever the forwarded headers say.
    case mount
    /// `Path={X-Forwarded-Prefix}` (`/web/sp`) when the request came through a proxy that sent
    /// `X-Forwarded-Host` and `X-Forwarded-Prefix` (an empty or `/` prefix gives `Path=/`);
    /// `Path=/sp` otherwise, as `mount`.
    case forwardedPrefix
    /// As `forwardedPrefix`, with a trailing `/` (`Path=/web/sp/`); `Path=/sp` without a prefix.
    case forwardedPrefixSlash
}

/// The `/sp` service provider's run-time settings (`GET|POST /control/sp`).
public struct SPSettings: Codable, Sendable, Equatable {
    public var binding: SAMLBinding
    /// Whether the challenge carries `com.sap.cloud.security.login: login-request`.
    public var identifyingHeader: Bool
    public var otp: SPOTPMode
    /// The `Path` of the `/sp` and `/basic-otp` session cookies.
    public var cookieScope: SPCookieScope
    /// Whether those cookies also get `Domain={X-Forwarded-Host without its port}` when the request
    /// came through a proxy that sent `X-Forwarded-Host`, as an SP configured with its public host
    /// name does; never without that header.
    public var cookieDomain: Bool

    public init(
        binding: SAMLBinding = .postForm, identifyingHeader: Bool = true, otp: SPOTPMode = .off,
        cookieScope: SPCookieScope = .mount, cookieDomain: Bool = false
    ) {
        self.binding = binding
        self.identifyingHeader = identifyingHeader
        self.otp = otp
        self.cookieScope = cookieScope
        self.cookieDomain = cookieDomain
    }
}
