import Conversation
import Foundation
public import Hummingbird
public import Logging
public import ServiceLifecycle
public import Store

extension Parley {
    /// The Hummingbird application: the router plus the services it depends on.
    /// Services start in order and stop in reverse, so the HTTP server (last) stops
    /// first and lets in-flight requests finish before the store closes.
    public func makeApplication(
        extraServices: [any Service] = [], onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            configuration: .init(address: .hostname(configuration.listenHost, port: configuration.listenPort), serverName: nil),
            services: services + extraServices,
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// Applies pending migrations under the store's advisory lock.
    public static func migrate(store: PostgresStore, directory: String?, logger: Logger) async throws -> [String] {
        guard let directory = directory ?? Migrator.locateDirectory() else {
            throw ParleyConfiguration.Invalid(problems: [
                "migrations not found: set PARLEY_MIGRATIONS_DIR or install them beside the binary (migrations/ or ../share/parley/migrations)"
            ])
        }
        return try await Migrator(store: store, directory: directory, logger: logger).migrate()
    }
}

/// Runs until graceful shutdown, then releases a resource (the libcurl transport).
public struct ShutdownHook: Service, CustomStringConvertible {
    let name: String
    public var description: String { "ShutdownHook(\(name))" }
    let action: @Sendable () async -> Void

    public init(name: String, action: @escaping @Sendable () async -> Void) {
        self.name = name
        self.action = action
    }

    public func run() async throws {
        try? await gracefulShutdown()
        await action()
    }
}
