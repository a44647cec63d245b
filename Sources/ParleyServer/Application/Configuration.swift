public import AuthFlows
import Conversation
public import CurlTransport
public import Foundation
public import ParleyCrypto
public import Store

/// Parley's configuration, read once from `PARLEY_*` variables and the
/// destinations file. Every problem is reported at start, not the first one only.
public struct ParleyConfiguration: Sendable {
    public var databaseURL: String
    public var listenHost: String
    public var listenPort: Int
    /// External base URL, possibly with a path prefix, without a trailing slash.
    public var publicURL: String
    public var keyRing: KeyRing
    /// SHA-256 of each admin token; presented tokens are compared in constant time.
    public var adminTokenHashes: [[UInt8]]
    public var destinations: [String: Destination]
    public var maxJSONBytes: Int
    /// Request bodies up to this size stay in memory for replay; larger ones are spooled.
    public var memoryBodyBytes: Int
    public var spoolDirectory: String
    /// `PARLEY_MIGRATIONS_DIR`: read migrations from here instead of the copies in the binary.
    public var migrationsDirectory: String?
    public var migrateOnStart: Bool
    public var databasePoolSize: Int
    public var managerIdleTimeout: Duration
    public var shutdownGracePeriod: Duration
    public var rateLimits: RateLimitSettings
    /// Audit events older than this are purged.
    public var auditRetention: Duration
    /// How often token use is written (`last_used_at`), in one batch.
    public var tokenUsageInterval: Duration = .seconds(5)
    /// Spool files of this instance hold at most this many bytes together.
    public var spoolQuotaBytes: Int64 = 8 << 30
    /// Proxied requests one registration may have in flight on this instance.
    public var maxInFlightPerRegistration = 256
    /// A client connection must deliver a complete request head within this time of
    /// opening or of its previous response (slowloris); an idle keep-alive connection
    /// is closed after it too.
    public var requestHeadTimeout: Duration = .seconds(20)
    /// A request body that stalls for this long closes the connection.
    public var requestBodyIdleTimeout: Duration = .seconds(30)
    /// An upstream transfer paused because its client stopped reading is ended after this.
    public var pausedTransferDeadline: Duration = .seconds(60)
    /// Connections open to one upstream host at a time; more exchanges wait for one.
    public var upstreamConnectionsPerHost = 32
    /// Connections open to all upstreams together, and the keep-alive cache's size.
    public var upstreamConnections = 256

    /// The upstream transport's settings (libcurl's connection limits and the paused-transfer deadline).
    public var transport: CurlTransport.Configuration {
        CurlTransport.Configuration(
            maxConnectionsPerHost: upstreamConnectionsPerHost, maxTotalConnections: upstreamConnections,
            pausedTransferDeadline: pausedTransferDeadline)
    }

    /// Where migrations come from: the directory when one is configured, else the binary.
    public var migrations: MigrationSource { Self.migrationSource(directory: migrationsDirectory) }

    /// `PARLEY_MIGRATIONS_DIR` when set and not empty, else the copies compiled into the binary.
    public static func migrationSource(directory: String?) -> MigrationSource {
        directory.flatMap { $0.isEmpty ? nil : .directory($0) } ?? .embedded(EmbeddedMigrations.files)
    }

    public struct Invalid: Error, CustomStringConvertible {
        public let problems: [String]
        public init(problems: [String]) { self.problems = problems }
        public var description: String {
            "Parley cannot start; fix the configuration:\n" + problems.map { "  - " + $0 }.joined(separator: "\n")
        }
    }

    public init(
        databaseURL: String, listenHost: String = "127.0.0.1", listenPort: Int = 8080, publicURL: String, keyRing: KeyRing,
        adminTokens: [String] = [], destinations: [Destination], maxJSONBytes: Int = 65536, memoryBodyBytes: Int = 1 << 20,
        spoolDirectory: String = NSTemporaryDirectory(), migrationsDirectory: String? = nil, migrateOnStart: Bool = true,
        databasePoolSize: Int = 16, managerIdleTimeout: Duration = .seconds(600), shutdownGracePeriod: Duration = .seconds(25),
        rateLimits: RateLimitSettings = RateLimitSettings(), auditRetention: Duration = .seconds(90 * 86_400)
    ) {
        self.rateLimits = rateLimits
        self.auditRetention = auditRetention
        self.databaseURL = databaseURL
        self.listenHost = listenHost
        self.listenPort = listenPort
        self.publicURL = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        self.keyRing = keyRing
        self.adminTokenHashes = adminTokens.map { SecretToken.hash($0) }
        self.destinations = Dictionary(destinations.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        self.maxJSONBytes = maxJSONBytes
        self.memoryBodyBytes = memoryBodyBytes
        self.spoolDirectory = spoolDirectory
        self.migrationsDirectory = migrationsDirectory
        self.migrateOnStart = migrateOnStart
        self.databasePoolSize = databasePoolSize
        self.managerIdleTimeout = managerIdleTimeout
        self.shutdownGracePeriod = shutdownGracePeriod
    }

    /// Reads the environment. `PARLEY_DATABASE_URL` and `PARLEY_ENCRYPTION_KEYS` are required here;
    /// the demo script provides both when it starts its own PostgreSQL.
    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) throws -> ParleyConfiguration {
        var problems: [String] = []
        let databaseURL = env["PARLEY_DATABASE_URL"] ?? ""
        if databaseURL.isEmpty { problems.append("PARLEY_DATABASE_URL is not set (a libpq connection string or URI)") }

        var host = "127.0.0.1"
        var port = 8080
        if let listen = env["PARLEY_LISTEN"], !listen.isEmpty {
            if let colon = listen.lastIndex(of: ":"), let p = Int(listen[listen.index(after: colon)...]), (0...65535).contains(p) {
                host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
                port = p
            } else {
                problems.append("PARLEY_LISTEN must be host:port, got '\(listen)'")
            }
        }

        let publicURL = env["PARLEY_PUBLIC_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://\(host):\(port)"
        if URLParts(publicURL) == nil || URLParts(publicURL)?.query != nil {
            problems.append("PARLEY_PUBLIC_URL must be an absolute http(s) URL without query, got '\(publicURL)'")
        }

        var keyRing: KeyRing?
        if let keys = env["PARLEY_ENCRYPTION_KEYS"], !keys.isEmpty {
            do { keyRing = try KeyRing.parse(keys) } catch { problems.append("\(error)") }
        } else {
            problems.append("PARLEY_ENCRYPTION_KEYS is not set (kid:base64(32 bytes)[,kid:…]; e.g. k1:$(openssl rand -base64 32))")
        }

        let adminTokens = (env["PARLEY_ADMIN_TOKENS"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
        if adminTokens.contains(where: { $0.utf8.count < 16 }) { problems.append("PARLEY_ADMIN_TOKENS: each token needs at least 16 characters") }

        var destinations: [Destination] = []
        if let path = env["PARLEY_DESTINATIONS"], !path.isEmpty {
            do {
                destinations = try DestinationsDocument.validate(try DestinationsFile.load(path: path))
            } catch let error as DestinationSpec.Invalid {
                problems += error.problems
            } catch {
                problems.append("\(error)")
            }
        } else {
            problems.append("PARLEY_DESTINATIONS is not set (path of the destinations YAML file)")
        }

        func int(_ name: String, default value: Int, range: ClosedRange<Int>) -> Int {
            guard let text = env[name], !text.isEmpty else { return value }
            guard let n = Int(text), range.contains(n) else {
                problems.append("\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
                return value
            }
            return n
        }
        let maxJSON = int("PARLEY_MAX_JSON_BYTES", default: 65536, range: 256...(16 << 20))
        let memoryBody = int("PARLEY_MEMORY_BODY_BYTES", default: 1 << 20, range: 0...(64 << 20))
        let poolSize = int("PARLEY_DATABASE_POOL_SIZE", default: 16, range: 1...500)
        let idle = int("PARLEY_MANAGER_IDLE_SECONDS", default: 600, range: 1...86400)
        let grace = int("PARLEY_SHUTDOWN_GRACE_SECONDS", default: 25, range: 0...3600)
        let spool = env["PARLEY_SPOOL_DIR"].flatMap { $0.isEmpty ? nil : $0 } ?? NSTemporaryDirectory()
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: spool, isDirectory: &isDirectory) || !isDirectory.boolValue {
            problems.append("PARLEY_SPOOL_DIR '\(spool)' is not a directory")
        }
        let migrateOnStart: Bool
        switch env["PARLEY_MIGRATE_ON_START"]?.lowercased() {
        case nil, "", "true", "1", "yes": migrateOnStart = true
        case "false", "0", "no": migrateOnStart = false
        case let other?:
            problems.append("PARLEY_MIGRATE_ON_START must be true or false, got '\(other)'")
            migrateOnStart = true
        }

        var limits = RateLimitSettings.defaults
        func limit(_ name: String, _ keyPath: WritableKeyPath<RateLimitSettings, RateLimit?>) {
            guard let text = env[name], !text.isEmpty else { return }
            guard let parsed = RateLimit.parse(text) else {
                problems.append("\(name) must be N/S (N events per S seconds) or off, got '\(text.prefix(40))'")
                return
            }
            limits[keyPath: keyPath] = parsed
        }
        limit("PARLEY_RATE_LIMIT_REGISTRATIONS", \.registrations)
        limit("PARLEY_RATE_LIMIT_PROXY", \.proxy)
        limit("PARLEY_RATE_LIMIT_TOKEN_CALLS", \.tokenCalls)
        limit("PARLEY_RATE_LIMIT_FAILED_LOGINS", \.failedLogins)
        limits.trustedProxies = Set(
            (env["PARLEY_TRUSTED_PROXIES"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        let retentionDays = int("PARLEY_AUDIT_RETENTION_DAYS", default: 90, range: 1...3650)

        let spoolQuotaMiB = int("PARLEY_SPOOL_QUOTA_MIB", default: 8192, range: 1...(1 << 24))
        let maxInFlight = int("PARLEY_MAX_INFLIGHT_PER_REGISTRATION", default: 256, range: 1...100_000)
        let headTimeout = int("PARLEY_REQUEST_HEAD_TIMEOUT_SECONDS", default: 20, range: 1...3600)
        let bodyIdle = int("PARLEY_REQUEST_BODY_IDLE_SECONDS", default: 30, range: 1...3600)
        let pausedDeadline = int("PARLEY_PAUSED_TRANSFER_SECONDS", default: 60, range: 1...86400)
        let perHost = int("PARLEY_UPSTREAM_CONNECTIONS_PER_HOST", default: 32, range: 1...10_000)
        let allHosts = int("PARLEY_UPSTREAM_CONNECTIONS", default: 256, range: 1...100_000)
        if allHosts < perHost {
            problems.append("PARLEY_UPSTREAM_CONNECTIONS (\(allHosts)) must be at least PARLEY_UPSTREAM_CONNECTIONS_PER_HOST (\(perHost))")
        }

        guard problems.isEmpty, let keyRing else { throw Invalid(problems: problems) }
        var configuration = ParleyConfiguration(
            databaseURL: databaseURL, listenHost: host, listenPort: port, publicURL: publicURL, keyRing: keyRing,
            adminTokens: adminTokens, destinations: destinations, maxJSONBytes: maxJSON, memoryBodyBytes: memoryBody,
            spoolDirectory: spool, migrationsDirectory: env["PARLEY_MIGRATIONS_DIR"].flatMap { $0.isEmpty ? nil : $0 }, migrateOnStart: migrateOnStart,
            databasePoolSize: poolSize, managerIdleTimeout: .seconds(idle), shutdownGracePeriod: .seconds(grace), rateLimits: limits,
            auditRetention: .seconds(retentionDays * 86_400))
        configuration.spoolQuotaBytes = Int64(spoolQuotaMiB) << 20
        configuration.maxInFlightPerRegistration = maxInFlight
        configuration.requestHeadTimeout = .seconds(headTimeout)
        configuration.requestBodyIdleTimeout = .seconds(bodyIdle)
        configuration.pausedTransferDeadline = .seconds(pausedDeadline)
        configuration.upstreamConnectionsPerHost = perHost
        configuration.upstreamConnections = allHosts
        return configuration
    }
}

/// The destinations file on disk; its text is read by `DestinationsDocument` (AuthFlows).
public enum DestinationsFile {
    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    public static func load(path: String) throws -> [DestinationSpec] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LoadError(description: "PARLEY_DESTINATIONS: cannot read '\(path)'")
        }
        return try parse(String(decoding: data, as: UTF8.self), source: path)
    }

    public static func parse(_ text: String, source: String = "destinations") throws -> [DestinationSpec] {
        do {
            return try DestinationsDocument.decode(text, source: source)
        } catch {
            throw LoadError(description: error.description)
        }
    }

    static func describe(_ error: DecodingError) -> String { DestinationsDocument.describe(error) }
}
