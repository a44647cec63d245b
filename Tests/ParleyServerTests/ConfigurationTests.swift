import Configuration
import CurlTransport
import Foundation
import ParleyDomain
@testable import ParleyServer
import Synchronization
import Testing

/// `ParleyConfiguration` read through a `ConfigReader`: from an in-memory provider as from the
/// environment, every problem at once, each naming its variable and none carrying a secret.
@Suite struct ConfigurationTests {
    static let key = "k1:" + Data(repeating: 1, count: 32).base64EncodedString()

    /// A destinations file with one destination, removed after `body`.
    static func withDestinations<T>(_ body: (String) throws -> T) throws -> T {
        let path = NSTemporaryDirectory() + "parley-configuration-\(UUID().uuidString).yaml"
        try "destinations:\n  - name: one\n    url: https://one.example\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(path)
    }

    static func required(_ destinations: String) -> [String: String] {
        ["PARLEY_DATABASE_URL": "postgres://parley:db-password@db/parley", "PARLEY_ENCRYPTION_KEYS": key, "PARLEY_DESTINATIONS": destinations]
    }

    @Test func anInMemoryProviderStandsInForTheEnvironment() throws {
        let configuration = try Self.withDestinations { path in
            try ParleyConfiguration(
                reading: ConfigReader(
                    provider: InMemoryProvider(values: [
                        "parley.database_url": ConfigValue("postgres://x", isSecret: true),
                        "parley.encryption_keys": ConfigValue(.string(Self.key), isSecret: true),
                        "parley.destinations": ConfigValue(.string(path), isSecret: false),
                        "parley.listen": "0.0.0.0:9090",
                        "parley.public_url": "https://parley.example/base/",
                        "parley.admin_tokens": ConfigValue(.stringArray(["admin-token-0123456789-0123456789abcdefghijk", " "]), isSecret: true),
                        "parley.max_json_bytes": 1024,
                        "parley.migrate_on_start": false,
                        "parley.rate_limit.proxy": "5/1",
                        "parley.rate_limit.failed_logins": "off",
                        "parley.upstream_connections_per_host": 8,
                        "parley.paused_transfer_seconds": 5,
                        "parley.audit_retention_days": 7,
                    ])))
        }
        #expect(configuration.server.host == "0.0.0.0" && configuration.server.port == 9090)
        #expect(configuration.server.publicURL == "https://parley.example/base")
        #expect(configuration.database.url == "postgres://x" && !configuration.database.migrateOnStart)
        #expect(configuration.keys.keyRing.sealingKeyID == "k1" && configuration.keys.adminTokenHashes.count == 1)
        #expect(Array(configuration.destinations.keys) == ["one"])
        #expect(configuration.limits.maxJSONBytes == 1024)
        #expect(configuration.rateLimits.proxy == RateLimit(count: 5, period: .seconds(1)))
        #expect(configuration.rateLimits.failedLogins == nil)
        #expect(configuration.rateLimits.registrations == RateLimitSettings.defaults.registrations)
        #expect(configuration.transport.maxConnectionsPerHost == 8 && configuration.transport.pausedTransferDeadline == .seconds(5))
        #expect(configuration.housekeeping.auditRetention == .seconds(7 * 86_400))
    }

    @Test func whatIsNotSetKeepsItsDefault() throws {
        let configuration = try Self.withDestinations { try ParleyConfiguration.fromEnvironment(Self.required($0)) }
        #expect(configuration.server.host == "127.0.0.1" && configuration.server.port == 8080)
        #expect(configuration.server.publicURL == "http://127.0.0.1:8080")
        #expect(configuration.database.poolSize == 16 && configuration.database.migrateOnStart)
        #expect(configuration.database.migrationsDirectory == nil)
        #expect(configuration.keys.adminTokenHashes.isEmpty)
        #expect(configuration.limits.maxJSONBytes == 65536 && configuration.limits.maxInFlightPerRegistration == 256)
        #expect(configuration.bodies.memoryBytes == 1 << 20 && configuration.bodies.spoolQuotaBytes == 8 << 30)
        #expect(configuration.bodies.spoolDirectory == NSTemporaryDirectory())
        #expect(configuration.transport == CurlTransport.Configuration())
        #expect(configuration.rateLimits == RateLimitSettings.defaults)
        #expect(configuration.timeouts.requestHead == .seconds(20) && configuration.timeouts.requestBodyIdle == .seconds(30))
        #expect(configuration.timeouts.managerIdle == .seconds(600) && configuration.timeouts.shutdownGrace == .seconds(25))
        #expect(configuration.housekeeping.auditRetention == .seconds(90 * 86_400))
    }

    @Test func anEmptyVariableCountsAsUnset() throws {
        let configuration = try Self.withDestinations { path in
            try ParleyConfiguration.fromEnvironment(
                Self.required(path).merging([
                    "PARLEY_PUBLIC_URL": "", "PARLEY_MAX_JSON_BYTES": "", "PARLEY_MIGRATE_ON_START": "", "PARLEY_RATE_LIMIT_PROXY": "",
                    "PARLEY_ADMIN_TOKENS": "", "PARLEY_MIGRATIONS_DIR": "",
                ]) { $1 })
        }
        #expect(configuration.server.publicURL == "http://127.0.0.1:8080")
        #expect(configuration.limits.maxJSONBytes == 65536 && configuration.database.migrateOnStart)
        #expect(configuration.rateLimits.proxy == RateLimitSettings.defaults.proxy)
        #expect(configuration.keys.adminTokenHashes.isEmpty && configuration.database.migrationsDirectory == nil)
    }

    @Test func everyProblemIsReportedWithItsVariableAndNoSecret() throws {
        let environment = [
            "PARLEY_ENCRYPTION_KEYS": "k1:c2VjcmV0LWtleS1tYXRlcmlhbA==,secret-without-id",
            "PARLEY_ADMIN_TOKENS": "short-secret",
            "PARLEY_LISTEN": "nowhere",
            "PARLEY_MAX_JSON_BYTES": "lots",
            "PARLEY_DATABASE_POOL_SIZE": "0",
            "PARLEY_MIGRATE_ON_START": "perhaps",
            "PARLEY_RATE_LIMIT_PROXY": "fast",
            "PARLEY_SPOOL_DIR": "/nonexistent/parley-spool",
            "PARLEY_SHUTDOWN_GRACE_SECONDS": "-1",
        ]
        let error = try #require(throws: ParleyConfiguration.Invalid.self) { try ParleyConfiguration.fromEnvironment(environment) }
        for expected in [
            "PARLEY_DATABASE_URL is not set", "PARLEY_DESTINATIONS is not set", "PARLEY_ENCRYPTION_KEYS: entry 2 is not 'kid:base64key'",
            "PARLEY_ADMIN_TOKENS: token 1 is too short; each needs at least 43 characters", "PARLEY_LISTEN must be host:port, got 'nowhere'",
            "PARLEY_MAX_JSON_BYTES must be a whole number in 256...16777216, got 'lots'",
            "PARLEY_DATABASE_POOL_SIZE must be a whole number in 1...500, got '0'",
            "PARLEY_MIGRATE_ON_START must be true or false, got 'perhaps'",
            "PARLEY_RATE_LIMIT_PROXY must be N/S (N events per S seconds) or off, got 'fast'",
            "PARLEY_SPOOL_DIR '/nonexistent/parley-spool' is not a directory",
            "PARLEY_SHUTDOWN_GRACE_SECONDS must be a whole number in 0...3600, got '-1'",
        ] {
            #expect(error.problems.contains { $0.hasPrefix(expected) }, "\(expected)")
        }
        #expect(error.problems.count == 11, "\(error.problems)")
        for secret in ["c2VjcmV0LWtleS1tYXRlcmlhbA", "secret-without-id", "short-secret"] {
            #expect(!error.description.contains(secret))
        }
    }

    @Test func secretsAreMarkedForTheAccessLog() {
        let events = Mutex<[AccessEvent]>([])
        struct Collect: AccessReporter {
            let events: @Sendable (AccessEvent) -> Void
            func report(_ event: AccessEvent) { events(event) }
        }
        let reader = ConfigReader(
            provider: EnvironmentVariablesProvider(
                environmentVariables: [
                    "PARLEY_DATABASE_URL": "postgres://u:db-password@h/d", "PARLEY_ADMIN_TOKENS": "admin-token-0123456789-0123456789abcdefghijk",
                    "PARLEY_ENCRYPTION_KEYS": Self.key,
                ],
                secretsSpecifier: .specific(ParleyConfiguration.secretVariables)),
            accessReporter: Collect { event in events.withLock { $0.append(event) } })
        _ = try? ParleyConfiguration(reading: reader)
        let read = events.withLock { $0 }
        let secrets = read.filter { ["database_url", "admin_tokens", "encryption_keys"].contains($0.metadata.key.components.last ?? "") }
        #expect(secrets.count == 3)
        #expect(secrets.allSatisfy { (try? $0.result.get())?.isSecret == true })
        let log = read.map(\.description).joined(separator: "\n")
        for secret in ["db-password", "admin-token-0123456789-0123456789abcdefghijk", String(Self.key.dropFirst(3))] { #expect(!log.contains(secret)) }
    }

    /// The variables `ParleyConfiguration` reads are the ones the API reference lists, and the
    /// reference lists no `PARLEY_*` variable that nothing reads.
    @Test func theVariablesReadAreTheDocumentedOnes() throws {
        let keys = Mutex<Set<String>>([])
        struct Collect: AccessReporter {
            let keys: @Sendable (String) -> Void
            func report(_ event: AccessEvent) { keys(event.metadata.key.components.joined(separator: "_").uppercased()) }
        }
        try Self.withDestinations { path in
            let reader = ConfigReader(
                provider: EnvironmentVariablesProvider(environmentVariables: Self.required(path)),
                accessReporter: Collect { name in _ = keys.withLock { $0.insert(name) } })
            _ = try ParleyConfiguration(reading: reader)
        }
        let read = keys.withLock { $0 }
        let api = try String(contentsOfFile: packageRoot + "/docs/api.md", encoding: .utf8)
        let table = try #require(api.components(separatedBy: "### Environment").dropFirst().first?.components(separatedBy: "\n### ").first)
        var documented = Set(table.matches(of: /`(PARLEY_[A-Z_]+)`/).map { String($0.output.1) })
        for suffix in table.matches(of: /`…(_[A-Z_]+)`/).map({ String($0.output.1) }) { documented.insert("PARLEY_RATE_LIMIT" + suffix) }
        // Read by the parley executable itself, before and beside the configuration.
        let executable: Set = ["PARLEY_LOG_LEVEL", "PARLEY_LOG_FORMAT", "PARLEY_OTEL_TRACES"]
        #expect(read.subtracting(documented).isEmpty, "read but not in docs/api.md: \(read.subtracting(documented).sorted())")
        #expect(documented.subtracting(read).subtracting(executable).isEmpty, "documented but not read: \(documented.subtracting(read).sorted())")
    }
}
