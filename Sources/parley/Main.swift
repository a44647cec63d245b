import CurlTransport
import Foundation
import Logging
import ParleyServer
import ServiceLifecycle
import Store

/// `parley serve | migrate | version`
@main
struct ParleyCommand {
    static let version = "0.1.0"

    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let environment = ProcessInfo.processInfo.environment
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = environment["PARLEY_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
            return handler
        }
        let logger = Logger(label: "parley")
        do {
            switch arguments.first {
            case "serve", nil: try await serve(environment: environment, logger: logger)
            case "migrate": try await migrate(environment: environment, logger: logger)
            case "version", "--version": print("parley \(version)")
            case "help", "--help", "-h": print(usage)
            default:
                FileHandle.standardError.write(Data("unknown command '\(arguments[0])'\n\(usage)\n".utf8))
                exit(64)
            }
        } catch let error as ParleyConfiguration.Invalid {
            FileHandle.standardError.write(Data((error.description + "\n").utf8))
            exit(78)
        } catch {
            logger.critical("parley stopped", metadata: ["error": "\(error)"])
            exit(1)
        }
    }

    static let usage = """
        usage: parley [serve|migrate|version]
          serve    run the service (default); applies migrations first unless PARLEY_MIGRATE_ON_START=false
          migrate  apply pending migrations and exit
          version  print the version
        """

    static func serve(environment: [String: String], logger: Logger) async throws {
        let configuration = try ParleyConfiguration.fromEnvironment(environment)
        let store = PostgresStore(
            configuration: StoreConfiguration(connectionString: configuration.databaseURL, maxConnections: configuration.databasePoolSize),
            logger: logger)
        if configuration.migrateOnStart {
            let applied = try await Parley.migrate(store: store, directory: configuration.migrationsDirectory, logger: logger)
            logger.info("migrations checked", metadata: ["migrations.applied": "\(applied.count)"])
        }
        let transport = CurlTransport(logger: logger)
        let parley = Parley(configuration: configuration, store: store, transport: transport, logger: logger)
        let app = parley.makeApplication(
            extraServices: [ShutdownHook(name: "transport") { transport.shutdown() }],
            onServerRunning: { port in
                logger.info("parley ready", metadata: ["listen.port": "\(port)", "public.url": .string(configuration.publicURL),
                    "destinations": "\(configuration.destinations.count)"])
            })
        var groupConfiguration = ServiceGroupConfiguration(
            services: [.init(service: app)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        try await ServiceGroup(configuration: groupConfiguration).run()
    }

    static func migrate(environment: [String: String], logger: Logger) async throws {
        guard let url = environment["PARLEY_DATABASE_URL"], !url.isEmpty else {
            throw ParleyConfiguration.Invalid(problems: ["PARLEY_DATABASE_URL is not set"])
        }
        let store = PostgresStore(configuration: StoreConfiguration(connectionString: url, maxConnections: 2), logger: logger)
        let applied = try await Parley.migrate(store: store, directory: environment["PARLEY_MIGRATIONS_DIR"], logger: logger)
        await store.shutdown()
        print(applied.isEmpty ? "migrations: up to date" : "migrations applied: " + applied.joined(separator: ", "))
    }
}
