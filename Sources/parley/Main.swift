import ArgumentParser
import OTel
import Configuration
import CurlTransport
import Foundation
import Logging
import ParleyServer
import ParleyDomain
import ServiceLifecycle
import Store

/// `parley serve | migrate | admin | rekey | version`, each with `--help`.
@main
struct ParleyCommand: AsyncParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "parley",
        abstract: "Parley, a token broker between thin clients and SAML2-, OTP- and OAuth2-protected back ends.",
        discussion: "Configuration comes from PARLEY_* environment variables (see docs/api.md); every problem is reported at once (exit 78).",
        version: version,
        subcommands: [Serve.self, Migrate.self, Admin.self, RekeyCommand.self, Version.self],
        defaultSubcommand: Serve.self)
}

/// Logging to standard error at `PARLEY_LOG_LEVEL` (default info, also for a level it does
/// not know), as text or, with `PARLEY_LOG_FORMAT=json`, one JSON object per line; with traces on,
/// every line carries the trace and span ids. Set up once per process; an unknown format exits 78.
func makeLogger(_ reader: ConfigReader) throws -> Logger {
    let level = reader.string(forKey: "parley.log_level", as: Logger.Level.self, default: .info)
    let format = reader.string(forKey: "parley.log_format")?.lowercased() ?? "text"
    guard format == "text" || format == "json" else {
        FileHandle.standardError.write(
            Data("Parley cannot start; fix the configuration:\n  - PARLEY_LOG_FORMAT must be 'text' or 'json', not '\(format.prefix(40))'\n".utf8))
        throw ExitCode(78)
    }
    // A traces problem is reported by Traces.bootstrap; here it only means no trace ids.
    let provider = ((try? Traces.enabled(reader)) ?? false) ? OTel.makeLoggingMetadataProvider() : nil
    LoggingSystem.bootstrap(
        { label, provider in
            var handler = LineLogHandler.standardError(label: label, format: format == "json" ? .json : .text, metadataProvider: provider)
            handler.logLevel = level
            return handler
        }, metadataProvider: provider)
    return Logger(label: "parley")
}

/// Runs a command body; a configuration problem exits 78 with every problem listed.
func runReportingConfiguration(logger: Logger, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as ParleyConfiguration.Invalid {
        FileHandle.standardError.write(Data((error.description + "\n").utf8))
        throw ExitCode(78)
    } catch let error as ExitCode {
        throw error
    } catch {
        logger.critical("parley stopped", metadata: ["error": "\(error)"])
        throw ExitCode.failure
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the service (the default); applies pending migrations first unless PARLEY_MIGRATE_ON_START=false.")

    func run() async throws {
        let reader = ParleyConfiguration.environmentReader()
        let logger = try makeLogger(reader)
        try await runReportingConfiguration(logger: logger) {
            let configuration = try ParleyConfiguration(reading: reader)
            // Before anything opens a span; nil when traces are off (the no-op tracer stays).
            let traces = try Traces.bootstrap(reader)
            let store = PostgresStore(
                configuration: StoreConfiguration(connectionString: configuration.database.url, maxConnections: configuration.database.poolSize),
                logger: logger)
            if configuration.database.migrateOnStart {
                let applied = try await migrate(store: store, source: configuration.database.migrations, logger: logger)
                logger.info("migrations checked", metadata: ["migrations.applied": "\(applied.count)"])
            }
            StartupChecks.sweepSpool(configuration, logger: logger)
            StartupChecks.warnAboutDestinations(configuration, logger: logger)
            let transport = CurlTransport(configuration: configuration.transport, logger: logger)
            let dependencies = ParleyDependencies.postgres(configuration: configuration, store: store, transport: transport, logger: logger)
            let app = try buildApplication(
                configuration: configuration,
                dependencies: dependencies,
                logger: logger,
                extraServices: [
                    ShutdownHook(name: "transport") { transport.shutdown() },
                    ShutdownNotice { [flowSignals = dependencies.flowSignals] in flowSignals.drain() },
                ],
                onServerRunning: { port in
                    logger.info(
                        "parley ready",
                        metadata: [
                            "listen.port": "\(port)", "public.url": .string(configuration.server.publicURL),
                            "destinations": "\(configuration.destinations.count)",
                        ])
                })
            // The exporter starts first and stops last, after the server's final spans.
            let services = (traces.map { [ServiceGroupConfiguration.ServiceConfiguration(service: $0)] } ?? []) + [.init(service: app)]
            var group = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            group.maximumGracefulShutdownDuration = configuration.timeouts.shutdownGrace
            try await ServiceGroup(configuration: group).run()
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply pending migrations (compiled in, or from PARLEY_MIGRATIONS_DIR) to PARLEY_DATABASE_URL and exit.")

    func run() async throws {
        let reader = ParleyConfiguration.environmentReader()
        let logger = try makeLogger(reader)
        try await runReportingConfiguration(logger: logger) {
            let database = try ParleyConfiguration.Database(reading: reader)
            let store = PostgresStore(configuration: StoreConfiguration(connectionString: database.url, maxConnections: 2), logger: logger)
            let applied = try await migrate(store: store, source: database.migrations, logger: logger)
            await store.shutdown()
            print(applied.isEmpty ? "migrations: up to date" : "migrations applied: " + applied.joined(separator: ", "))
        }
    }
}

struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the version.")

    func run() {
        print("parley \(ParleyCommand.version)")
    }
}
