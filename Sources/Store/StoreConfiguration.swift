internal import CPostgres

/// How the store reaches PostgreSQL and how large its pool may grow.
public struct StoreConfiguration: Sendable {
    /// A libpq connection string, keyword/value (`host=a,b dbname=parley`) or URI
    /// (`postgresql://user@a,b/parley?target_session_attrs=read-write`), passed to libpq as it is.
    public var connectionString: String
    /// The most connections the pool opens at once.
    public var maxConnections: Int
    /// How long a caller waits for a connection before failing with `.unavailable`.
    public var acquireTimeout: Duration
    /// The `connect_timeout` used when the connection string sets none. libpq counts whole seconds
    /// per host, at least 2.
    public var connectTimeout: Duration

    public init(
        connectionString: String,
        maxConnections: Int = 10,
        acquireTimeout: Duration = .seconds(2),
        connectTimeout: Duration = .seconds(3)
    ) {
        self.connectionString = connectionString
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        self.connectTimeout = connectTimeout
    }

    /// Every problem with this configuration, as secret-free sentences; empty when it is usable.
    public var problems: [String] {
        var problems: [String] = []
        if maxConnections < 1 { problems.append("maxConnections must be at least 1") }
        if acquireTimeout <= .zero { problems.append("acquireTimeout must be positive") }
        if connectTimeout <= .zero { problems.append("connectTimeout must be positive") }
        if connectionString.isEmpty {
            problems.append("the database connection string is empty")
        } else {
            // The parser's message may quote the string, password included: say only that it failed.
            var errorMessage: UnsafeMutablePointer<CChar>?
            if let options = PQconninfoParse(connectionString, &errorMessage) {
                PQconninfoFree(options)
            } else {
                problems.append("the database connection string cannot be parsed by libpq")
            }
            if let errorMessage { PQfreemem(errorMessage) }
        }
        return problems
    }

    /// libpq keyword/value pairs for `PQconnectdbParams` with `expand_dbname`: defaults come before
    /// the user's string, so that the string's own settings win; what the driver relies on comes
    /// after it.
    var connectParameters: [(String, String)] {
        let seconds = max(2, Int((connectTimeout.components.seconds)) + (connectTimeout.components.attoseconds > 0 ? 1 : 0))
        return [
            ("connect_timeout", String(seconds)),
            ("fallback_application_name", "parley"),
            ("keepalives", "1"),
            ("keepalives_idle", "30"),
            ("keepalives_interval", "10"),
            ("keepalives_count", "3"),
            ("dbname", connectionString),
            ("client_encoding", "UTF8"),
        ]
    }
}
