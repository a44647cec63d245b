public import AuthFlows
public import Configuration
import Conversation
public import CurlTransport
public import Foundation
public import ParleyCrypto
public import Store
public import ParleyDomain

/// Parley's configuration: one small struct per component, each read once through a
/// `ConfigReader` (the environment's `PARLEY_*` variables in production) together with the
/// destinations file. Every problem is reported at start, not the first one only.
public struct ParleyConfiguration: Sendable {
    public var server: Server
    public var database: Database
    public var keys: Keys
    public var destinations: [String: Destination]
    /// The destinations file's `identityProviders`: whose identity tokens a registration may carry.
    public var identityProviders: [IdentityProvider]
    /// The destinations file's webhook endpoints (global and per destination), secrets read.
    public var webhooks: [WebhookEndpoint] = []
    /// The destinations file's `browserApps`: web apps that call Parley with a cookie, not a token.
    public var browserApps: [BrowserApp] = []
    public var limits: Limits
    public var bodies: Bodies
    /// The upstream transport: libcurl's connection limits and the paused-transfer deadline.
    public var transport: CurlTransport.Configuration
    public var rateLimits: RateLimitSettings
    public var timeouts: Timeouts
    public var housekeeping: Housekeeping
    /// Client connections to this instance: `PARLEY_MAX_CONNECTIONS`, `PARLEY_IDLE_TIMEOUT_SECONDS`.
    public var connections = Connections()
    /// The destinations' logos (`branding.logo`), read and checked at start, by destination name.
    var pageLogos: [String: PageLogo] = [:]

    /// Every problem with the configuration, one line each.
    public struct Invalid: Error, CustomStringConvertible {
        public let problems: [String]
        public init(problems: [String]) { self.problems = problems }
        public var description: String {
            "Parley cannot start; fix the configuration:\n" + problems.map { "  - " + $0 }.joined(separator: "\n")
        }
    }

    /// A configuration made in code (tests, embedding); what is not given keeps its default,
    /// except the rate limits, which are off.
    public init(
        server: Server, database: Database, keys: Keys, destinations: [Destination], limits: Limits = Limits(), bodies: Bodies = Bodies(),
        transport: CurlTransport.Configuration = CurlTransport.Configuration(), rateLimits: RateLimitSettings = RateLimitSettings(),
        timeouts: Timeouts = Timeouts(), housekeeping: Housekeeping = Housekeeping(), identityProviders: [IdentityProvider] = []
    ) {
        self.server = server
        self.database = database
        self.keys = keys
        self.destinations = Dictionary(destinations.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        self.identityProviders = identityProviders
        self.limits = limits
        self.bodies = bodies
        self.transport = transport
        self.rateLimits = rateLimits
        self.timeouts = timeouts
        self.housekeeping = housekeeping
    }

    /// Reads every component from `reader` (keys under `parley`, see `SettingsReader`).
    /// `PARLEY_DATABASE_URL`, `PARLEY_ENCRYPTION_KEYS` and `PARLEY_DESTINATIONS` are required;
    /// the demo script provides them when it starts its own PostgreSQL.
    public init(reading reader: ConfigReader) throws(Invalid) {
        self = try SettingsReader.read(reader) { settings in
            // Every component is read, so that every problem is reported.
            let server = Server(reading: settings)
            let database = Database(reading: settings)
            let keys = Keys(reading: settings)
            let file = Self.destinationsFile(reading: settings)
            let limits = Limits(reading: settings)
            let bodies = Bodies(reading: settings)
            let transport = CurlTransport.Configuration(reading: settings)
            let rateLimits = RateLimitSettings(reading: settings)
            let timeouts = Timeouts(reading: settings)
            let housekeeping = Housekeeping(reading: settings)
            let connections = Connections(reading: settings)
            for destination in file.destinations where destination.oauth2?.grant == .saml2Bearer
                && keys?.signingKeys?.entries.contains(where: { $0.certificateDER != nil }) != true
            {
                settings.report(
                    "destination '\(destination.name)': oauth2.grant saml2_bearer needs a signing key with its certificate in the same PEM file (\(settings.variable("signing_keys")))")
            }
            for destination in file.destinations where destination.oauth2?.grant == .jwtBearer && destination.oauth2?.propagation?.assertion == .parley && keys?.signingKeys == nil {
                settings.report(
                    "destination '\(destination.name)': oauth2.assertion parley needs Parley's signing keys, and \(settings.variable("signing_keys")) is not set")
            }
            for destination in file.destinations where destination.implicitRegistrations && destination.oauth2?.propagation != nil
                && keys?.signingKeys == nil
            {
                settings.report(
                    "destination '\(destination.name)': an agent's grant speaks with a token Parley signs for the user (the agent's own token is sent nowhere), and \(settings.variable("signing_keys")) is not set")
            }
            guard let keys else { return nil }
            var configuration = ParleyConfiguration(
                server: server, database: database, keys: keys, destinations: file.destinations, limits: limits, bodies: bodies,
                transport: transport, rateLimits: rateLimits, timeouts: timeouts, housekeeping: housekeeping,
                identityProviders: file.identityProviders)
            configuration.connections = connections
            let logos = PageAssets.readLogos(file.destinations)
            logos.problems.forEach(settings.report)
            configuration.pageLogos = logos.logos
            let resolved = WebhookEndpoint.resolve(file.webhooks, environment: ProcessInfo.processInfo.environment)
            resolved.problems.forEach(settings.report)
            configuration.webhooks = resolved.endpoints
            configuration.browserApps = file.browserApps
            return configuration
        }
    }

    /// Reads the environment (the process's unless given); an empty variable counts as unset.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws(Invalid) -> ParleyConfiguration {
        try ParleyConfiguration(reading: environmentReader(environment))
    }

    /// `PARLEY_DESTINATIONS`: the destinations file (destinations and identity providers),
    /// every problem in it reported.
    static func destinationsFile(
        reading settings: SettingsReader
    ) -> (destinations: [Destination], identityProviders: [IdentityProvider], webhooks: [WebhookSubscription], browserApps: [BrowserApp]) {
        guard let path = settings.string("destinations") else {
            settings.report("\(settings.variable("destinations")) is not set (path of the destinations YAML file)")
            return ([], [], [], [])
        }
        do {
            let checked = try DestinationsDocument.validate(try DestinationsFile.loadContents(path: path))
            return (checked.destinations, checked.identityProviders, checked.allWebhooks, checked.browserApps)
        } catch let error as DestinationSpec.Invalid {
            error.problems.forEach(settings.report)
        } catch {
            settings.report("\(error)")
        }
        return ([], [], [], [])
    }
}

extension ParleyConfiguration {
    /// Where Parley listens and how it is reached: `PARLEY_LISTEN`, `PARLEY_PUBLIC_URL`,
    /// `PARLEY_WEB_PUBLIC_URL`, `PARLEY_RESOURCE`.
    public struct Server: Sendable {
        public var host: String
        public var port: Int
        /// External base URL, possibly with a path prefix, without a trailing slash.
        public var publicURL: String
        /// The hosted upstream's own origin (`/web/{destination}/…` is seen there, nowhere else),
        /// possibly with a path prefix, without a trailing slash; nil: it shares `publicURL`.
        public var webPublicURL: String? {
            didSet { webPublicURL = webPublicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } }
        }
        /// Parley's resource identifier (RFC 9728, RFC 8707): the `aud` an agent's access token
        /// must name (`PARLEY_RESOURCE`); nil: the public URL.
        public var resource: String?
        /// `PARLEY_TASKS_ON_EVENT_LOOPS` (default true): each connection's work runs on the NIO
        /// event loop that owns it (`LoopBoundChannel`), so a proxied request stays on that thread.
        public var tasksOnEventLoops = true

        /// What an agent's access token must name as its audience.
        public var resourceIdentifier: String { resource ?? publicURL }

        /// Without a public URL, `http://host:port`.
        public init(host: String = "127.0.0.1", port: Int = 8080, publicURL: String? = nil, webPublicURL: String? = nil) {
            self.host = host
            self.port = port
            let url = publicURL ?? "http://\(host):\(port)"
            self.publicURL = url.hasSuffix("/") ? String(url.dropLast()) : url
            self.webPublicURL = webPublicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        }

        init(reading settings: SettingsReader) {
            var host = "127.0.0.1"
            var port = 8080
            if let listen = settings.string("listen") {
                if let colon = listen.lastIndex(of: ":"), let p = Int(listen[listen.index(after: colon)...]), (0...65535).contains(p) {
                    host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
                    port = p
                } else {
                    settings.report("\(settings.variable("listen")) must be host:port, got '\(listen.prefix(80))'")
                }
            }
            self.init(host: host, port: port, publicURL: settings.string("public_url"), webPublicURL: settings.string("web_public_url"))
            resource = settings.string("resource")
            tasksOnEventLoops = settings.bool("tasks_on_event_loops", default: true)
            if let resource, URLParts(resource) == nil || resource.contains("#") || resource.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
                settings.report("\(settings.variable("resource")) must be an absolute http(s) URL without fragment or spaces, got '\(resource.prefix(200))'")
            }
            if URLParts(publicURL) == nil || URLParts(publicURL)?.query != nil {
                settings.report(
                    "\(settings.variable("public_url")) must be an absolute http(s) URL without query, got '\(publicURL.prefix(200))'")
            }
            if let web = webPublicURL {
                if URLParts(web) == nil || URLParts(web)?.query != nil || web.contains("#") {
                    settings.report(
                        "\(settings.variable("web_public_url")) must be an absolute http(s) URL without query or fragment, got '\(web.prefix(200))'"
                    )
                } else if let webHost = URLParts(web)?.host, webHost == URLParts(publicURL)?.host {
                    // Cookies are kept per host, not per port: another port is no origin of its own.
                    settings.report(
                        "\(settings.variable("web_public_url")) must name another host than \(settings.variable("public_url")) (both name '\(webHost.prefix(200))')"
                    )
                }
            }
        }
    }

    /// The database and its schema: `PARLEY_DATABASE_URL`, `PARLEY_DATABASE_POOL_SIZE`,
    /// `PARLEY_MIGRATIONS_DIR`, `PARLEY_MIGRATE_ON_START`.
    public struct Database: Sendable {
        /// A libpq connection string or URI; a secret (it may hold a password).
        public var url: String
        public var poolSize: Int
        /// Read migrations from here instead of the copies in the binary.
        public var migrationsDirectory: String?
        public var migrateOnStart: Bool

        public init(url: String, poolSize: Int = 16, migrationsDirectory: String? = nil, migrateOnStart: Bool = true) {
            self.url = url
            self.poolSize = poolSize
            self.migrationsDirectory = migrationsDirectory
            self.migrateOnStart = migrateOnStart
        }

        /// Reads the database settings alone (`parley migrate`, `parley rekey`).
        public init(reading reader: ConfigReader) throws(Invalid) {
            self = try SettingsReader.read(reader) { Database(reading: $0) }
        }

        init(reading settings: SettingsReader) {
            let url = settings.string("database_url", secret: true)
            if url == nil { settings.report("\(settings.variable("database_url")) is not set (a libpq connection string or URI)") }
            self.init(
                url: url ?? "", poolSize: settings.int("database_pool_size", default: 16, in: 1...500),
                migrationsDirectory: settings.string("migrations_dir"), migrateOnStart: settings.bool("migrate_on_start", default: true))
        }

        /// Where migrations come from: the directory when one is configured, else the binary.
        public var migrations: MigrationSource {
            migrationsDirectory.flatMap { $0.isEmpty ? nil : .directory($0) } ?? .embedded(EmbeddedMigrations.files)
        }
    }

    /// The key ring and the admin tokens: `PARLEY_ENCRYPTION_KEYS`, `PARLEY_ADMIN_TOKENS`.
    /// Problems name a key by its id and a token by nothing.
    public struct Keys: Sendable {
        public var keyRing: KeyRing
        /// SHA-256 of each admin token; presented tokens are compared in constant time.
        public var adminTokenHashes: [[UInt8]]
        /// `PARLEY_SIGNING_KEYS`: Parley's own signing keys (`kid:<path to PEM private key>[,…]`),
        /// for the assertions of propagation grants; published at `/.well-known/jwks.json`.
        public var signingKeys: ParleySigningKeys?
        /// 32 random bytes in base64url without padding.
        public static let minimumAdminTokenLength = 43

        public init(keyRing: KeyRing, adminTokens: [String] = []) {
            self.keyRing = keyRing
            self.adminTokenHashes = adminTokens.map { SecretToken.hash($0) }
        }

        /// Nil, with the problems reported, when there is no usable key ring.
        init?(reading settings: SettingsReader) {
            let adminTokens = settings.list("admin_tokens", secret: true)
            for (index, token) in adminTokens.enumerated() where token.utf8.count < Self.minimumAdminTokenLength {
                // By position only: a token's value (or its length) is never written anywhere.
                settings.report(
                    "\(settings.variable("admin_tokens")): token \(index + 1) is too short; each needs at least \(Self.minimumAdminTokenLength) characters (32 random bytes in base64url: openssl rand -base64 32 | tr '+/' '-_' | tr -d '=')")
            }
            guard let keys = settings.string("encryption_keys", secret: true) else {
                settings.report(
                    "\(settings.variable("encryption_keys")) is not set (kid:base64(32 bytes)[,kid:…]; e.g. k1:$(openssl rand -base64 32))")
                return nil
            }
            var signingKeys: ParleySigningKeys?
            if let listed = settings.string("signing_keys") {
                do {
                    signingKeys = try ParleySigningKeys.parse(listed) { path in FileManager.default.contents(atPath: path).map { Array($0) } }
                } catch {
                    settings.report("\(settings.variable("signing_keys")): \(error)")  // kids and paths, never key material
                }
            }
            do {
                self.init(keyRing: try KeyRing.parse(keys), adminTokens: adminTokens)
                self.signingKeys = signingKeys
            } catch {
                settings.report("\(error)")  // ids and positions, never key material
                return nil
            }
        }
    }

    /// What one caller may ask of an instance: `PARLEY_MAX_JSON_BYTES`,
    /// `PARLEY_MAX_INFLIGHT_PER_REGISTRATION`, `PARLEY_MAX_INFLIGHT_WEB_PER_CLIENT`,
    /// `PARLEY_MAX_INFLIGHT_FLOWS_PER_REGISTRATION`.
    public struct Limits: Sendable {
        public var maxJSONBytes: Int
        /// Proxied requests one registration may have in flight on this instance.
        public var maxInFlightPerRegistration: Int
        /// Requests on the web path (`/web/…`) one client address may have in flight here.
        public var maxInFlightWebPerClient: Int
        /// `POST /v1/flows` one registration may have in flight here.
        public var maxInFlightFlowsPerRegistration: Int

        public init(
            maxJSONBytes: Int = 65536, maxInFlightPerRegistration: Int = 256, maxInFlightWebPerClient: Int = 64,
            maxInFlightFlowsPerRegistration: Int = 4
        ) {
            self.maxJSONBytes = maxJSONBytes
            self.maxInFlightPerRegistration = maxInFlightPerRegistration
            self.maxInFlightWebPerClient = maxInFlightWebPerClient
            self.maxInFlightFlowsPerRegistration = maxInFlightFlowsPerRegistration
        }

        init(reading settings: SettingsReader) {
            self.init(
                maxJSONBytes: settings.int("max_json_bytes", default: 65536, in: 256...(16 << 20)),
                maxInFlightPerRegistration: settings.int("max_inflight_per_registration", default: 256, in: 1...100_000),
                maxInFlightWebPerClient: settings.int("max_inflight_web_per_client", default: 64, in: 1...100_000),
                maxInFlightFlowsPerRegistration: settings.int("max_inflight_flows_per_registration", default: 4, in: 1...10_000))
        }
    }

    /// Proxied request bodies, in memory or spooled: `PARLEY_MEMORY_BODY_BYTES`,
    /// `PARLEY_SPOOL_DIR`, `PARLEY_SPOOL_QUOTA_MIB`.
    public struct Bodies: Sendable {
        /// Request bodies up to this size stay in memory for replay; larger ones are spooled.
        public var memoryBytes: Int
        public var spoolDirectory: String
        /// Spool files of this instance hold at most this many bytes together.
        public var spoolQuotaBytes: Int64

        public init(memoryBytes: Int = 1 << 20, spoolDirectory: String = NSTemporaryDirectory(), spoolQuotaBytes: Int64 = 8 << 30) {
            self.memoryBytes = memoryBytes
            self.spoolDirectory = spoolDirectory
            self.spoolQuotaBytes = spoolQuotaBytes
        }

        init(reading settings: SettingsReader) {
            let spool = settings.string("spool_dir") ?? NSTemporaryDirectory()
            var isDirectory: ObjCBool = false
            if !FileManager.default.fileExists(atPath: spool, isDirectory: &isDirectory) || !isDirectory.boolValue {
                settings.report("\(settings.variable("spool_dir")) '\(spool.prefix(200))' is not a directory")
            }
            self.init(
                memoryBytes: settings.int("memory_body_bytes", default: 1 << 20, in: 0...(64 << 20)), spoolDirectory: spool,
                spoolQuotaBytes: Int64(settings.int("spool_quota_mib", default: 8192, in: 1...(1 << 24))) << 20)
        }
    }

    /// How long things may take: `PARLEY_REQUEST_HEAD_TIMEOUT_SECONDS`,
    /// `PARLEY_REQUEST_BODY_IDLE_SECONDS`, `PARLEY_MANAGER_IDLE_SECONDS`, `PARLEY_SHUTDOWN_GRACE_SECONDS`.
    public struct Timeouts: Sendable {
        /// A client connection must deliver a complete request head within this time of
        /// opening or of its previous response (slowloris); an idle keep-alive connection
        /// is closed after it too.
        public var requestHead: Duration
        /// A request body that stalls for this long closes the connection.
        public var requestBodyIdle: Duration
        /// An unused registration's conversation manager is dropped after this.
        public var managerIdle: Duration
        /// In-flight requests may finish for this long after SIGTERM.
        public var shutdownGrace: Duration

        public init(
            requestHead: Duration = .seconds(20), requestBodyIdle: Duration = .seconds(30), managerIdle: Duration = .seconds(600),
            shutdownGrace: Duration = .seconds(25)
        ) {
            self.requestHead = requestHead
            self.requestBodyIdle = requestBodyIdle
            self.managerIdle = managerIdle
            self.shutdownGrace = shutdownGrace
        }

        init(reading settings: SettingsReader) {
            self.init(
                requestHead: .seconds(settings.int("request_head_timeout_seconds", default: 20, in: 1...3600)),
                requestBodyIdle: .seconds(settings.int("request_body_idle_seconds", default: 30, in: 1...3600)),
                managerIdle: .seconds(settings.int("manager_idle_seconds", default: 600, in: 1...86400)),
                shutdownGrace: .seconds(settings.int("shutdown_grace_seconds", default: 25, in: 0...3600)))
        }
    }

    /// Client connections: at most `maxConnections` open at once on this instance (more wait in the
    /// listen backlog until one closes), and a connection with no request in progress that sends
    /// nothing for `idleTimeout` is closed. `PARLEY_MAX_CONNECTIONS`, `PARLEY_IDLE_TIMEOUT_SECONDS`.
    public struct Connections: Sendable {
        public var maxConnections: Int
        public var idleTimeout: Duration

        public init(maxConnections: Int = 10_000, idleTimeout: Duration = .seconds(60)) {
            self.maxConnections = maxConnections
            self.idleTimeout = idleTimeout
        }

        init(reading settings: SettingsReader) {
            self.init(
                maxConnections: settings.int("max_connections", default: 10_000, in: 1...1_000_000),
                idleTimeout: .seconds(settings.int("idle_timeout_seconds", default: 60, in: 1...86_400)))
        }
    }

    /// Work done in the background: `PARLEY_AUDIT_RETENTION_DAYS`.
    public struct Housekeeping: Sendable {
        /// Audit events older than this are purged.
        public var auditRetention: Duration
        /// How often token use is written (`last_used_at`), in one batch.
        public var tokenUsageInterval: Duration
        /// Refresh ahead of need: a registration's authorization-code token that expires within
        /// this is refreshed in the background (`PARLEY_REFRESH_AHEAD_SECONDS`; zero: off).
        public var refreshAhead: Duration
        /// How often the background refresh looks (`PARLEY_REFRESH_AHEAD_INTERVAL_SECONDS`), with
        /// up to a fifth of it added at random, so instances do not look in step.
        public var refreshAheadInterval: Duration
        /// The most refreshes one look starts per destination (`PARLEY_REFRESH_AHEAD_PER_DESTINATION`).
        public var refreshAheadPerDestination: Int
        /// The most refreshes one look starts per authorization server, however many destinations
        /// share its token endpoint (`PARLEY_REFRESH_AHEAD_PER_SERVER`).
        public var refreshAheadPerServer: Int = 100
        /// After this many transient refresh failures of one token in a row, `token.refresh_failed`
        /// is sent (`PARLEY_REFRESH_FAILED_EVENT_AFTER`).
        public var refreshFailedEventAfter: Int = 5

        public init(
            auditRetention: Duration = .seconds(90 * 86_400), tokenUsageInterval: Duration = .seconds(5), refreshAhead: Duration = .seconds(300),
            refreshAheadInterval: Duration = .seconds(30), refreshAheadPerDestination: Int = 50
        ) {
            self.auditRetention = auditRetention
            self.tokenUsageInterval = tokenUsageInterval
            self.refreshAhead = refreshAhead
            self.refreshAheadInterval = refreshAheadInterval
            self.refreshAheadPerDestination = refreshAheadPerDestination
        }

        init(reading settings: SettingsReader) {
            self.init(
                auditRetention: .seconds(settings.int("audit_retention_days", default: 90, in: 1...3650) * 86_400),
                refreshAhead: .seconds(settings.int("refresh_ahead_seconds", default: 300, in: 0...86_400)),
                refreshAheadInterval: .seconds(settings.int("refresh_ahead_interval_seconds", default: 30, in: 1...3600)),
                refreshAheadPerDestination: settings.int("refresh_ahead_per_destination", default: 50, in: 1...10_000))
            refreshAheadPerServer = settings.int("refresh_ahead_per_server", default: 100, in: 1...100_000)
            refreshFailedEventAfter = settings.int("refresh_failed_event_after", default: 5, in: 1...1000)
        }
    }
}

extension CurlTransport.Configuration {
    /// `PARLEY_UPSTREAM_CONNECTIONS_PER_HOST`, `PARLEY_UPSTREAM_CONNECTIONS`, `PARLEY_PAUSED_TRANSFER_SECONDS`;
    /// the buffer marks keep their defaults.
    init(reading settings: SettingsReader) {
        let perHost = settings.int("upstream_connections_per_host", default: 32, in: 1...10_000)
        let all = settings.int("upstream_connections", default: 256, in: 1...100_000)
        if all < perHost {
            settings.report(
                "\(settings.variable("upstream_connections")) (\(all)) must be at least \(settings.variable("upstream_connections_per_host")) (\(perHost))")
        }
        self.init(
            maxConnectionsPerHost: perHost, maxTotalConnections: all,
            pausedTransferDeadline: .seconds(settings.int("paused_transfer_seconds", default: 60, in: 1...86400)))
    }
}

extension RateLimitSettings {
    /// `PARLEY_RATE_LIMIT_REGISTRATIONS`, `…_PROXY`, `…_TOKEN_CALLS`, `…_FAILED_LOGINS`, `…_WEB`,
    /// `…_FLOWS`, `…_FAILED_ADMIN`, `…_PAGES`, `…_FAILED_CLIENT_TOKENS` (`N/S` or `off`, unset keeps the default) and
    /// `PARLEY_TRUSTED_PROXIES` (addresses and CIDR ranges; an entry that is neither is a
    /// problem named by its position).
    init(reading settings: SettingsReader) {
        self = .defaults
        let limits = settings.scoped("rate_limit")
        func limit(_ key: String, _ keyPath: WritableKeyPath<RateLimitSettings, RateLimit?>) {
            guard let text = limits.string(key) else { return }
            guard let parsed = RateLimit.parse(text) else {
                limits.report("\(limits.variable(key)) must be N/S (N events per S seconds) or off, got '\(text.prefix(40))'")
                return
            }
            self[keyPath: keyPath] = parsed
        }
        limit("registrations", \.registrations)
        limit("proxy", \.proxy)
        limit("token_calls", \.tokenCalls)
        limit("failed_logins", \.failedLogins)
        limit("web", \.web)
        limit("flows", \.flows)
        limit("failed_admin", \.failedAdmin)
        limit("pages", \.pages)
        limit("failed_client_tokens", \.failedClientTokens)
        trustedProxies = []
        for (index, entry) in settings.list("trusted_proxies").enumerated() {
            guard let range = IPRange(entry) else {
                settings.report(
                    "\(settings.variable("trusted_proxies")): entry \(index + 1) is not an IP address or CIDR range (a.b.c.d, a.b.c.d/n, x:y::z, x:y::/n), got '\(entry.prefix(64))'")
                continue
            }
            trustedProxies.append(range)
        }
    }
}

/// The destinations file on disk; its text is read by `DestinationsDocument` (AuthFlows).
public enum DestinationsFile {
    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    public static func load(path: String) throws -> [DestinationSpec] {
        try loadContents(path: path).destinations
    }

    /// The whole file as written: destinations and identity providers.
    public static func loadContents(path: String) throws -> DestinationsDocument.Contents {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LoadError(description: "PARLEY_DESTINATIONS: cannot read '\(path)'")
        }
        return try parseContents(String(decoding: data, as: UTF8.self), source: path)
    }

    public static func parse(_ text: String, source: String = "destinations") throws -> [DestinationSpec] {
        try parseContents(text, source: source).destinations
    }

    public static func parseContents(_ text: String, source: String = "destinations") throws -> DestinationsDocument.Contents {
        do {
            return try DestinationsDocument.decodeContents(text, source: source)
        } catch {
            throw LoadError(description: error.description)
        }
    }

    static func describe(_ error: DecodingError) -> String { DestinationsDocument.describe(error) }
}
