/// How the simulated SMP behaves. Defaults match the demo and the tests.
public struct SimulatorConfiguration: Sendable, Equatable {
    /// Credentials `GET /api/data` accepts with HTTP Basic.
    public var basicUsername: String
    public var basicPassword: String
    /// Realm in `WWW-Authenticate: Basic realm="…"`.
    public var basicRealm: String
    /// Upper bound for `GET /files/big?mb=N`.
    public var maxBigFileMiB: Int
    /// Upper bound for `GET /slow?ms=N`.
    public var maxSlowMilliseconds: Int
    /// Clients of the OAuth2 authorization server; its one user is the Basic user.
    public var oauthClients: [OAuthClient]
    /// How long an access token is valid (`expires_in` rounds it up to whole seconds).
    public var accessTokenLifetime: Duration

    public init(
        basicUsername: String = "alice",
        basicPassword: String = "wonderland",
        basicRealm: String = "smp",
        maxBigFileMiB: Int = 8192,
        maxSlowMilliseconds: Int = 600_000,
        oauthClients: [OAuthClient] = OAuthClient.defaults,
        accessTokenLifetime: Duration = .seconds(3600)
    ) {
        self.basicUsername = basicUsername
        self.basicPassword = basicPassword
        self.basicRealm = basicRealm
        self.maxBigFileMiB = maxBigFileMiB
        self.maxSlowMilliseconds = maxSlowMilliseconds
        self.oauthClients = oauthClients
        self.accessTokenLifetime = accessTokenLifetime
    }
}
