import Foundation
import Logging
import ParleyTesting
import Store
import Synchronization
import Testing

let quietLogger = Logger(label: "parley.store.tests", factory: { _ in SwiftLogNoOpLogHandler() })

struct DeadlineExceeded: Error, CustomStringConvertible {
    let description: String
}

/// Polls `condition` until it holds or `limit` passes. Only for waiting on state outside the
/// test's control (a notification crossing the server); never as a substitute for a signal.
func eventually(
    within limit: Duration = .seconds(10),
    _ what: String,
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + limit
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else { throw DeadlineExceeded(description: "timed out waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A fresh database on the process-wide test server.
func freshDatabase() async throws -> String {
    try await PostgresServer.shared().createDatabase()
}

/// Runs `body` with a pool and shuts the pool down afterwards.
func withStore<T>(
    _ connectionString: String,
    maxConnections: Int = 4,
    acquireTimeout: Duration = .seconds(2),
    _ body: (PostgresStore) async throws -> T
) async throws -> T {
    try await withPostgresStore(
        StoreConfiguration(connectionString: connectionString, maxConnections: maxConnections, acquireTimeout: acquireTimeout),
        logger: quietLogger, body)
}

/// The `StoreError` that `body` throws; records an issue when it throws something else or nothing.
func storeError(
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> StoreError? {
    do {
        try await body()
        Issue.record("expected a StoreError, nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as StoreError {
        return error
    } catch {
        Issue.record("expected a StoreError, got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Figures worth reporting, printed so that they show in the test log.
func measured(_ line: String) {
    print("[measured] \(line)")
}

extension Duration {
    var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}

/// A shareable, lock-protected value for tests.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<T>(_ body: (inout sending Value) throws -> sending T) rethrows -> sending T { try mutex.withLock(body) }
    var value: Value { mutex.withLock { $0 } }
}
