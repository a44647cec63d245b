public import Logging
public import Store

/// A pool on `configuration` for `body`, shut down afterwards, whether `body` returns or throws.
public func withPostgresStore<T>(
    _ configuration: StoreConfiguration, logger: Logger = Logger(label: "parley.testing.store", factory: { _ in SwiftLogNoOpLogHandler() }),
    _ body: (PostgresStore) async throws -> T
) async throws -> T {
    let store = PostgresStore(configuration: configuration, logger: logger)
    do {
        let result = try await body(store)
        await store.shutdown()
        return result
    } catch {
        await store.shutdown()
        throw error
    }
}
