internal import CPostgres
import Foundation
import Synchronization
import NIOPosix

/// One libpq connection. Lent by ``PostgresStore/withConnection(isolation:_:)``; use it only inside
/// that closure and from one task at a time. Every blocking libpq call runs on the store's
/// `NIOThreadPool`, never on an event loop or the cooperative pool.
public final class PostgresConnection: @unchecked Sendable {
    // @unchecked: the handle is used by one task at a time (the lease) and closed exactly once
    // through `closed`.
    private let closed = Atomic<Bool>(false)
    /// A statement failed as `.unavailable` while libpq still calls the connection good: the
    /// server is shutting down or no longer accepts writes (a primary demoted after a
    /// failover, SQLSTATE 25006). The pool closes it instead of lending it again, so the next
    /// connection goes through the connection string's host list and `target_session_attrs`.
    private let condemned = Atomic<Bool>(false)
    let handle: OpaquePointer
    private let threadPool: NIOThreadPool
    /// A process-unique number, for logs.
    public let id: Int

    init(handle: OpaquePointer, id: Int, threadPool: NIOThreadPool) {
        self.handle = handle
        self.id = id
        self.threadPool = threadPool
    }

    deinit { close() }

    // MARK: statements

    /// Runs one statement and returns its rows.
    public func query(_ sql: SQL) async throws -> [Row] {
        let (text, bindings) = sql.rendered
        return try await condemningIfUnavailable {
            try await run { [self] in try Self.execute(handle, text: text, bindings: bindings).rows }
        }
    }

    /// Runs one statement and returns the number of rows it affected (0 when it reports none).
    @discardableResult
    public func execute(_ sql: SQL) async throws -> Int {
        let (text, bindings) = sql.rendered
        return try await condemningIfUnavailable {
            try await run { [self] in try Self.execute(handle, text: text, bindings: bindings).affected }
        }
    }

    /// Runs a script of several statements with the simple query protocol (no parameters).
    /// Used for migrations; never pass untrusted input.
    public func executeScript(unsafeSQL script: String) async throws {
        try await condemningIfUnavailable {
            try await run { [self] in
                guard let result = PQexec(handle, script) else { throw Self.connectionError(handle) }
                defer { PQclear(result) }
                try Self.check(result, handle)
            }
        }
    }

    /// Runs `body`; a `.unavailable` failure marks the connection unfit for reuse.
    private func condemningIfUnavailable<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as StoreError where error.code == .unavailable {
            condemned.store(true, ordering: .releasing)
            throw error
        }
    }

    // MARK: state

    /// libpq still considers the connection good.
    var isConnected: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Good, outside any transaction, and no statement found the server unavailable: fit to go
    /// back to the pool.
    var isReusable: Bool {
        isConnected && !condemned.load(ordering: .acquiring) && PQtransactionStatus(handle) == PQTRANS_IDLE
    }

    /// Reads whatever the server sent while the connection sat idle (never blocks) and says
    /// whether the connection survived it: a server that shut down or restarted has closed it.
    ///
    /// A server shutting down first sends a FATAL message and then closes: one read consumes the
    /// message, the next sees the end of the stream. So read while the socket has something.
    func checkAlive() -> Bool {
        for _ in 0..<8 {
            guard isConnected, PQtransactionStatus(handle) == PQTRANS_IDLE else { return false }
            var socket = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            let ready = poll(&socket, 1, 0)
            if ready == 0 { return true }
            if ready < 0 { return errno == EINTR && isConnected }
            guard PQconsumeInput(handle) == 1 else { return false }
        }
        // Still readable after several reads: an idle connection should not be this chatty.
        return false
    }

    /// `PQfinish`, exactly once however often it is called.
    func close() {
        if closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
            PQfinish(handle)
        }
    }

    /// Runs `body` on the thread pool. A task cancelled before the work starts throws
    /// `CancellationError` and leaves the connection untouched; with `cancellable: false` the work
    /// runs regardless (used for ROLLBACK).
    func run<T: Sendable>(cancellable: Bool = true, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            if cancellable {
                return try await threadPool.runIfActive(body)
            }
            return try await withCheckedThrowingContinuation { continuation in
                threadPool.submit { _ in continuation.resume(with: Result(catching: body)) }
            }
        } catch is NIOThreadPoolError.ThreadPoolInactive {
            throw StoreError.unavailable("the store has been shut down")
        }
    }

    // MARK: blocking libpq (call on the thread pool only)

    /// Opens a connection; blocks for up to `connect_timeout` per host.
    static func connect(_ parameters: [(String, String)]) throws -> OpaquePointer {
        let keywords = parameters.map { strdup($0.0) }
        let values = parameters.map { strdup($0.1) }
        defer {
            keywords.forEach { free($0) }
            values.forEach { free($0) }
        }
        var keywordPointers = keywords.map { UnsafePointer($0) } + [nil]
        var valuePointers = values.map { UnsafePointer($0) } + [nil]
        guard let handle = PQconnectdbParams(&keywordPointers, &valuePointers, 1) else {
            throw StoreError.unavailable("libpq could not allocate a connection")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(handle))
            PQfinish(handle)
            throw StoreError.unavailable("could not connect to the database", detail: message)
        }
        // Notices (e.g. "relation already exists, skipping") would go to stderr.
        PQsetNoticeReceiver(handle, { _, _ in }, nil)
        return handle
    }

    /// Settings the text decoding relies on, whatever the server's defaults are.
    static func prepareSession(_ handle: OpaquePointer) throws {
        let setup = "SET DateStyle TO 'ISO'; SET TimeZone TO 'UTC'; SET bytea_output TO 'hex'; SET extra_float_digits TO 3"
        guard let result = PQexec(handle, setup) else { throw connectionError(handle) }
        defer { PQclear(result) }
        try check(result, handle)
    }

    static func execute(_ handle: OpaquePointer, text: String, bindings: [SQL.Binding]) throws -> (rows: [Row], affected: Int) {
        for binding in bindings where binding.value?.utf8.contains(0) == true {
            throw StoreError(code: .query, context: "a text parameter contains a NUL character")
        }
        let types: [Oid] = bindings.map { Oid($0.type.oid) }
        let values: [UnsafePointer<CChar>?] = bindings.map { binding in binding.value.map { UnsafePointer(strdup($0)!) } }
        defer { values.forEach { free(UnsafeMutablePointer(mutating: $0)) } }
        let result = types.withUnsafeBufferPointer { typePointer in
            values.withUnsafeBufferPointer { valuePointer in
                PQexecParams(handle, text, Int32(bindings.count), typePointer.baseAddress, valuePointer.baseAddress, nil, nil, 0)
            }
        }
        guard let result else { throw connectionError(handle) }
        defer { PQclear(result) }
        try check(result, handle)
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        guard PQresultStatus(result) == PGRES_TUPLES_OK else { return ([], affected) }
        return (rows(of: result), affected)
    }

    private static func rows(of result: OpaquePointer) -> [Row] {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        var names: [String] = []
        var types: [SQLType] = []
        for column in 0..<columnCount {
            names.append(String(cString: PQfname(result, Int32(column))))
            types.append(SQLType(oid: UInt32(PQftype(result, Int32(column)))))
        }
        let description = RowDescription(names: names, types: types)
        var rows: [Row] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var values: [String?] = []
            values.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    values.append(nil)
                } else {
                    values.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(Row(description: description, values: values))
        }
        return rows
    }

    /// Throws the classified error when `result` reports a failure.
    static func check(_ result: OpaquePointer, _ handle: OpaquePointer) throws {
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return
        default:
            func field(_ code: UInt8) -> String? {
                PQresultErrorField(result, Int32(code)).map { String(cString: $0) }
            }
            let message = PQresultErrorMessage(result).map { String(cString: $0) }
            throw StoreError.server(
                sqlState: field(UInt8(ascii: "C")),
                constraint: field(UInt8(ascii: "n")),
                message: message,
                connectionBroken: PQstatus(handle) != CONNECTION_OK
            )
        }
    }

    static func connectionError(_ handle: OpaquePointer) -> StoreError {
        let message = String(cString: PQerrorMessage(handle))
        if PQstatus(handle) != CONNECTION_OK {
            return .unavailable("the database connection was lost", detail: message)
        }
        return StoreError(code: .query, context: "libpq could not run the statement", detail: message)
    }
}
