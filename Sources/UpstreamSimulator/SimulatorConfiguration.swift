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

    public init(
        basicUsername: String = "alice",
        basicPassword: String = "wonderland",
        basicRealm: String = "smp",
        maxBigFileMiB: Int = 8192,
        maxSlowMilliseconds: Int = 600_000
    ) {
        self.basicUsername = basicUsername
        self.basicPassword = basicPassword
        self.basicRealm = basicRealm
        self.maxBigFileMiB = maxBigFileMiB
        self.maxSlowMilliseconds = maxSlowMilliseconds
    }
}
