public import Logging
public import ServiceLifecycle
import Synchronization
internal import CPostgres
import NIOCore
import NIOPosix

/// A bounded pool of libpq connections.
///
/// Connections are lent through scoped calls — ``withConnection(isolation:_:)`` and
/// ``withTransaction(isolation:_:)`` — and opened on demand, at most
/// ``StoreConfiguration/maxConnections`` at a time; callers beyond that wait in FIFO order for at
/// most ``StoreConfiguration/acquireTimeout``. When PostgreSQL is down every call fails within
/// about the connect timeout with ``StoreError/Code/unavailable``; when it is back the next call
/// opens a fresh connection, so the pool recovers without a restart. A connection that broke, or
/// whose statement found the server unavailable (shutting down, or read-only: a primary demoted by
/// a failover), is closed rather than lent again; with a multi-host connection string and
/// `target_session_attrs=read-write`, libpq then finds the host that accepts writes.
///
/// As a `Service` it runs until graceful shutdown and then closes its connections.
public final class PostgresStore: Sendable, Service {
    typealias Waiter = PendingAcquire
    typealias StateMachine = PoolStateMachine<PostgresConnection, Waiter>

    struct PendingAcquire: Sendable {
        let continuation: CheckedContinuation<StateMachine.Grant, any Error>
        let timeout: Scheduled<Void>
    }

    private struct State: ~Copyable {
        var machine: StateMachine
        var nextWaiterID = 0
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }

    public let configuration: StoreConfiguration
    let logger: Logger
    let threadPool: NIOThreadPool
    private let state: Mutex<State>
    private static let connectionIDs = Atomic<Int>(0)

    /// Creates the pool. No connection is opened until one is needed; the pool's worker threads
    /// (one per possible connection) start here and stop in ``shutdown()``, which every pool
    /// needs (or run it as a `Service`).
    public init(configuration: StoreConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        let threadPool = NIOThreadPool(numberOfThreads: max(1, configuration.maxConnections))
        threadPool.start()
        self.threadPool = threadPool
        self.state = Mutex(State(machine: StateMachine(maxConnections: configuration.maxConnections)))
    }

    // MARK: lending

    /// Lends a connection for the duration of `body`. A connection that broke or was left inside a
    /// transaction is closed instead of returned.
    public func withConnection<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await lease()
        let result: T
        do {
            result = try await body(connection)
        } catch {
            release(connection)
            throw error
        }
        release(connection)
        return result
    }

    /// Runs `body` inside `BEGIN` … `COMMIT`; any error rolls the transaction back and is rethrown.
    public func withTransaction<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await StoreTrace.run(nil) { try await transaction(body) }
    }

    private func transaction<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            try await connection.execute("BEGIN")
            let result: T
            do {
                result = try await body(connection)
            } catch {
                if connection.isConnected {
                    // Runs even when the task is cancelled; if it fails the connection is left in
                    // a transaction and the pool closes it.
                    _ = try? await connection.run(cancellable: false) {
                        try PostgresConnection.execute(connection.handle, text: "ROLLBACK", bindings: [])
                    }
                }
                throw error
            }
            try await connection.execute("COMMIT")
            return result
        }
    }

    /// Runs one statement on a pooled connection and returns its rows.
    public func query(_ sql: SQL) async throws -> [Row] {
        try await StoreTrace.run(sql) { try await withConnection { try await $0.query(sql) } }
    }

    /// Runs one statement on a pooled connection and returns the number of rows it affected.
    @discardableResult
    public func execute(_ sql: SQL) async throws -> Int {
        try await StoreTrace.run(sql) { try await withConnection { try await $0.execute(sql) } }
    }

    /// `pg_notify(channel, payload)`, both bound as parameters. Delivered when the surrounding
    /// transaction (if any) commits.
    public func notify(channel: String, payload: String) async throws {
        try await execute("SELECT pg_notify(\(channel), \(payload))")
    }

    /// The database answers and no migration in `migrationsDirectory` is pending. Never throws:
    /// what failed is logged.
    public func isReady(migrations: MigrationSource) async -> Bool {
        do {
            return try await Migrator(store: self, source: migrations, logger: logger).pending().isEmpty
        } catch {
            logger.debug("store not ready", metadata: ["error": "\(error)"])
            return false
        }
    }

    /// Counters for tests and metrics.
    public struct Statistics: Sendable {
        /// Open connections plus connection attempts under way.
        public var open: Int
        /// The highest `open` seen.
        public var peakOpen: Int
        public var idle: Int
        public var waiting: Int
    }

    public var statistics: Statistics {
        state.withLock {
            Statistics(open: $0.machine.open, peakOpen: $0.machine.peakOpen, idle: $0.machine.idleCount, waiting: $0.machine.waitingCount)
        }
    }

    // MARK: lifecycle

    public func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }

    /// Fails waiting callers, closes idle connections, waits for lent connections to come back
    /// (they are closed then), and stops the worker threads. Later calls fail with `.unavailable`.
    public func shutdown() async {
        let action = state.withLock { $0.machine.shutdown() }
        for waiter in action.fail {
            waiter.timeout.cancel()
            waiter.continuation.resume(throwing: StoreError.unavailable("the store has been shut down"))
        }
        for connection in action.close { close(connection) }
        if !action.drained {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let drained = state.withLock { state in
                    if state.machine.open == 0 { return true }
                    state.drainWaiters.append(continuation)
                    return false
                }
                if drained { continuation.resume() }
            }
        }
        try? await threadPool.shutdownGracefully()
        logger.debug("store shut down")
    }

    // MARK: acquiring

    private func lease() async throws -> PostgresConnection {
        let grant: StateMachine.Grant
        switch state.withLock({ $0.machine.acquire() }) {
        case .grant(let immediate):
            grant = immediate
        case .shutDown:
            throw StoreError.unavailable("the store has been shut down")
        case .mustWait:
            grant = try await waitForGrant()
        }
        switch grant {
        case .connection(let connection):
            if connection.checkAlive() { return connection }
            logger.debug("closing a pooled connection that broke while idle", metadata: ["db.connection.id": "\(connection.id)"])
            state.withLock { $0.machine.replacingDeadConnection() }
            close(connection)
            return try await connectInSlot()
        case .connect:
            return try await connectInSlot()
        }
    }

    private func waitForGrant() async throws -> StateMachine.Grant {
        let id = state.withLock { state in
            defer { state.nextWaiterID &+= 1 }
            return state.nextWaiterID
        }
        let timeout = configuration.acquireTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                // The timer runs on NIO's shared event loops (only taken when a caller has to wait).
                let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .nanoseconds(Self.nanoseconds(timeout))) { [weak self] in
                    guard let self else { return }
                    self.giveUp(waiterID: id, with: StoreError.unavailable("timed out waiting for a database connection"))
                }
                let action = state.withLock {
                    $0.machine.enqueue(id: id, waiter: PendingAcquire(continuation: continuation, timeout: timer))
                }
                switch action {
                case .queued:
                    break
                case .grant(let grant):
                    timer.cancel()
                    continuation.resume(returning: grant)
                case .shutDown:
                    timer.cancel()
                    continuation.resume(throwing: StoreError.unavailable("the store has been shut down"))
                }
            }
        } onCancel: {
            giveUp(waiterID: id, with: CancellationError())
        }
    }

    private func giveUp(waiterID: Int, with error: any Error) {
        guard let waiter = state.withLock({ $0.machine.removeWaiter(id: waiterID) }) else { return }
        waiter.timeout.cancel()
        if error is StoreError {
            logger.warning("timed out waiting for a database connection", metadata: ["db.pool.max": "\(configuration.maxConnections)"])
        }
        waiter.continuation.resume(throwing: error)
    }

    /// Opens a connection in a slot this task owns; on failure the slot passes on.
    private func connectInSlot() async throws -> PostgresConnection {
        let parameters = configuration.connectParameters
        let id = Self.connectionIDs.wrappingAdd(1, ordering: .relaxed).newValue
        do {
            let handle = try await threadPool.runIfActive {
                let handle = try PostgresConnection.connect(parameters)
                do {
                    try PostgresConnection.prepareSession(handle)
                } catch {
                    PQfinish(handle)
                    throw error
                }
                return UncheckedHandle(pointer: handle)
            }
            state.withLock { $0.machine.connectSucceeded() }
            logger.debug("opened a database connection", metadata: ["db.connection.id": "\(id)"])
            return PostgresConnection(handle: handle.pointer, id: id, threadPool: threadPool)
        } catch {
            let unreachable = error is StoreError
            let action = state.withLock { $0.machine.connectFailed(unreachable: unreachable) }
            if let next = action.resume {
                next.timeout.cancel()
                next.continuation.resume(returning: .connect)
            }
            let failure: any Error
            if error is NIOThreadPoolError.ThreadPoolInactive {
                failure = StoreError.unavailable("the store has been shut down")
            } else {
                failure = error
                if let storeError = error as? StoreError {
                    logger.warning(
                        "could not connect to the database",
                        metadata: ["error": "\(storeError)", "db.pool.waiters.failed": "\(action.fail.count)"]
                    )
                }
            }
            for waiter in action.fail {
                waiter.timeout.cancel()
                waiter.continuation.resume(throwing: failure)
            }
            if action.drained { resumeDrainWaiters() }
            throw failure
        }
    }

    private func release(_ connection: PostgresConnection) {
        let reusable = connection.isReusable
        let action = state.withLock { $0.machine.release(connection, reusable: reusable) }
        if let (waiter, grant) = action.resume {
            waiter.timeout.cancel()
            waiter.continuation.resume(returning: grant)
        }
        if let broken = action.close {
            if !reusable {
                logger.debug("closing a database connection that broke or was left in a transaction", metadata: ["db.connection.id": "\(broken.id)"])
            }
            close(broken)
        }
        if action.drained { resumeDrainWaiters() }
    }

    private func close(_ connection: PostgresConnection) {
        // PQfinish may write a Terminate message (or a TLS close); keep it off the caller's thread.
        threadPool.submit { _ in connection.close() }
    }

    private func resumeDrainWaiters() {
        let waiters = state.withLock { state in
            defer { state.drainWaiters.removeAll() }
            return state.drainWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

/// A libpq handle crossing from the worker thread back to the task that owns it.
struct UncheckedHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
