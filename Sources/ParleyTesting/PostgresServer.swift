import Foundation
import Logging
import Store
import Synchronization

/// A throwaway PostgreSQL server for tests: `initdb` into a fresh temporary directory, `pg_ctl`
/// on a free 127.0.0.1 port, user `parley` with trust authentication, `fsync=off`.
///
/// As root (CI containers) every command runs as the `postgres` user through `runuser`; otherwise
/// as the current user. Servers still running at process exit are stopped and removed then.
///
/// ```swift
/// try await PostgresServer.withServer { server in … server.connectionString … }
/// ```
///
/// Every server can feed a streaming-replication standby (`wal_level = replica`, WAL senders, a
/// `replication` entry in `pg_hba.conf`): `startStandby()` clones it with `pg_basebackup -R`,
/// `promote()` turns the standby into a primary, and `multiHostConnectionString` names both for
/// libpq with `target_session_attrs=read-write` (failover tests).
public final class PostgresServer: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The TCP port, fixed for the server's life (also across `stop()` / `start()`).
    public let port: Int
    /// The temporary directory holding `data/`, the socket directory and the log.
    public let directory: String
    private let binDirectory: String
    private let running = Mutex(false)

    private var dataDirectory: String { directory + "/data" }
    private var logFile: String { directory + "/postgres.log" }

    /// A URI for database `postgres` as user `parley`.
    public var connectionString: String { connectionString(database: "postgres") }

    public func connectionString(database: String) -> String {
        "postgresql://parley@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    private init(port: Int, directory: String, binDirectory: String) {
        self.port = port
        self.directory = directory
        self.binDirectory = binDirectory
    }

    deinit {
        if running.withLock({ $0 }) { Self.stopImmediately(binDirectory: binDirectory, dataDirectory: dataDirectory) }
    }

    // MARK: lifecycle

    /// Creates, configures and starts a new server.
    public static func start() async throws -> PostgresServer {
        let bin = try findBinDirectory()
        let directory = try makeDirectory()
        let port = try LoopbackSocket(listening: false).port
        let server = PostgresServer(port: port, directory: directory, binDirectory: bin)
        registry.withLock { $0[directory] = Leftover(bin: bin, data: directory + "/data") }
        do {
            try await server.command(
                "initdb", ["-D", server.dataDirectory, "-A", "trust", "-U", "parley", "-E", "UTF8", "--no-locale", "-N"]
            )
            try server.appendConfiguration([
                "port = \(port)",
                "listen_addresses = '127.0.0.1'",
                "unix_socket_directories = '\(directory)'",
                "fsync = off",
                "synchronous_commit = off",
                "full_page_writes = off",
                "max_connections = 200",
                "shared_buffers = 32MB",
                // A standby can be cloned from any test server (`startStandby()`).
                "wal_level = replica",
                "max_wal_senders = 10",
                "hot_standby = on",
            ])
            try server.appendHostBasedAuthentication(["host replication parley 127.0.0.1/32 trust"])
            try await server.start()
        } catch {
            try? await server.destroy()
            throw error
        }
        return server
    }

    /// Starts the server again after `stop()`: same port, same data.
    public func start() async throws {
        do {
            try await command("pg_ctl", ["-D", dataDirectory, "-l", logFile, "-w", "-t", "60", "start"])
        } catch {
            throw Failure(description: "\(error)\n--- postgres.log (tail) ---\n\(logTail())")
        }
        running.withLock { $0 = true }
    }

    /// How `stop(mode:)` shuts the server down (`pg_ctl stop -m`).
    public enum ShutdownMode: String, Sendable {
        /// Waits for clients to disconnect.
        case smart
        /// Ends sessions, then a clean shutdown (checkpoint).
        case fast
        /// Kills every server process at once, no checkpoint: what a crashed or unplugged
        /// machine looks like (recovery on the next start).
        case immediate
    }

    /// `pg_ctl stop -m <mode>` (`fast` by default), returning once the server is down.
    public func stop(mode: ShutdownMode = .fast) async throws {
        try await command("pg_ctl", ["-D", dataDirectory, "-m", mode.rawValue, "-w", "-t", "60", "stop"])
        running.withLock { $0 = false }
    }

    /// `stop()` then `start()`.
    public func restart() async throws {
        try await stop()
        try await start()
    }

    /// Stops the server if it runs and removes its directory.
    public func destroy() async throws {
        if running.withLock({ $0 }) {
            try? await command("pg_ctl", ["-D", dataDirectory, "-m", "immediate", "-w", "-t", "60", "stop"])
            running.withLock { $0 = false }
        }
        try? FileManager.default.removeItem(atPath: directory)
        _ = Self.registry.withLock { $0.removeValue(forKey: directory) }
    }

    /// Starts a server for `body` and destroys it afterwards, whatever happens.
    public static func withServer<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresServer) async throws -> T
    ) async throws -> T {
        let server = try await start()
        do {
            let result = try await body(server)
            try await server.destroy()
            return result
        } catch {
            try? await server.destroy()
            throw error
        }
    }

    /// One server shared by the whole test process, started on first use and removed at exit.
    /// Tests that stop or restart PostgreSQL must start their own.
    public static func shared() async throws -> PostgresServer {
        let task = sharedServer.withLock { shared in
            if let task = shared { return task }
            let task = Task { try await PostgresServer.start() }
            shared = task
            return task
        }
        return try await task.value
    }

    /// Creates a database (a fresh random name by default) and returns its connection string.
    public func createDatabase(_ name: String? = nil) async throws -> String {
        let name = name ?? "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }) else {
            throw Failure(description: "database names in tests are lower-case letters, digits and _")
        }
        let store = PostgresStore(
            configuration: StoreConfiguration(connectionString: connectionString, maxConnections: 1),
            logger: Logger(label: "parley.testing.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        do {
            try await store.execute(SQL(unsafeSQL: "CREATE DATABASE \(name)"))
        } catch {
            await store.shutdown()
            throw error
        }
        await store.shutdown()
        return connectionString(database: name)
    }

    // MARK: replication

    /// A streaming-replication standby of this server: `pg_basebackup -R` (WAL streamed along)
    /// into a new temporary directory, started on a port of its own. It follows this server until
    /// `promote()`; destroy it like any other server.
    public func startStandby() async throws -> PostgresServer {
        let directory = try Self.makeDirectory()
        let port = try LoopbackSocket(listening: false).port
        let standby = PostgresServer(port: port, directory: directory, binDirectory: binDirectory)
        Self.registry.withLock { $0[directory] = Leftover(bin: binDirectory, data: directory + "/data") }
        do {
            try await standby.command(
                "pg_basebackup",
                [
                    "-D", standby.dataDirectory, "-h", "127.0.0.1", "-p", String(self.port), "-U", "parley",
                    "-X", "stream", "-R", "-c", "fast", "-w",
                ])
            // The copied postgresql.conf names the primary's port and socket directory; later lines win.
            try standby.appendConfiguration(["port = \(port)", "unix_socket_directories = '\(directory)'"])
            try await standby.start()
        } catch {
            try? await standby.destroy()
            throw Failure(description: "cannot start a standby of 127.0.0.1:\(self.port): \(error)")
        }
        return standby
    }

    /// `pg_ctl promote`, then waits (bounded by `timeout`) until `pg_is_in_recovery()` is false:
    /// from then on the server accepts writes.
    public func promote(timeout: Duration = .seconds(30)) async throws {
        try await command("pg_ctl", ["-D", dataDirectory, "-w", "-t", "60", "promote"])
        let deadline = ContinuousClock.now + timeout
        while try await isInRecovery() {
            guard ContinuousClock.now < deadline else {
                throw Failure(description: "the standby on port \(port) still recovers \(timeout) after promote\n\(logTail())")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `SELECT pg_is_in_recovery()`: true while the server is a standby.
    public func isInRecovery() async throws -> Bool {
        try await withStore { store in
            try await Self.onlyRow(store.query("SELECT pg_is_in_recovery() AS recovering")).bool("recovering")
        }
    }

    /// Waits (bounded by `timeout`) until this standby replayed everything `primary` had written
    /// when the call began (`pg_current_wal_insert_lsn()` there, `pg_last_wal_replay_lsn()` here).
    public func waitForReplay(of primary: PostgresServer, timeout: Duration = .seconds(30)) async throws {
        let target = try await primary.withStore { store in
            try await Self.onlyRow(store.query("SELECT pg_current_wal_insert_lsn()::text AS lsn")).string("lsn")
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let caughtUp = try await withStore { store in
                try await Self.onlyRow(
                    store.query("SELECT coalesce(pg_last_wal_replay_lsn() >= \(target)::pg_lsn, false) AS caught_up")
                ).bool("caught_up")
            }
            if caughtUp { return }
            guard ContinuousClock.now < deadline else {
                throw Failure(description: "the standby on port \(port) did not replay up to \(target) within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// One libpq URI naming every server in order, for database `database` as user `parley`, with
    /// `target_session_attrs=read-write`: libpq tries the hosts in turn and keeps only a connection
    /// to a server that accepts writes (a primary, never a standby still in recovery).
    public static func multiHostConnectionString(_ servers: [PostgresServer], database: String = "postgres") -> String {
        let hosts = servers.map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
        return "postgresql://parley@\(hosts)/\(database)?sslmode=disable&target_session_attrs=read-write"
    }

    private static func onlyRow(_ rows: [Row]) throws -> Row {
        guard let row = rows.first else { throw Failure(description: "a one-row query answered no row") }
        return row
    }

    /// A one-connection pool on this server's `postgres` database for `body`, shut down afterwards.
    private func withStore<T: Sendable>(_ body: (PostgresStore) async throws -> T) async throws -> T {
        try await withPostgresStore(StoreConfiguration(connectionString: connectionString, maxConnections: 1), body)
    }

    /// The last lines of the server log, for failure messages.
    public func logTail(lines: Int = 30) -> String {
        guard let text = try? String(contentsOfFile: logFile, encoding: .utf8) else { return "(no log)" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    // MARK: processes

    private static let isRoot = getuid() == 0

    /// Runs a PostgreSQL binary (as `postgres` when we are root) and waits for it on a thread of
    /// its own, so no task blocks.
    private func command(_ tool: String, _ arguments: [String]) async throws {
        let argv = try Self.argv(binDirectory + "/" + tool, arguments)
        let outputPath = directory + "/\(tool).out"
        let directory = self.directory
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try Spawn.runAndWait(argv, output: outputPath, directory: directory) })
            }
            thread.name = "parley-postgres-\(tool)"
            thread.start()
        }
        guard status == 0 else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            throw Failure(description: "\(tool) \(arguments.joined(separator: " ")) exited with status \(status):\n\(text)")
        }
    }

    /// `pg_ctl stop -m immediate`, synchronously: for `deinit` and process exit.
    private static func stopImmediately(binDirectory: String, dataDirectory: String) {
        let arguments = ["-D", dataDirectory, "-m", "immediate", "-w", "-t", "30", "stop"]
        guard let argv = try? argv(binDirectory + "/pg_ctl", arguments) else { return }
        _ = try? Spawn.runAndWait(argv, output: nil, directory: nil)
    }

    private static func argv(_ executable: String, _ arguments: [String]) throws -> [String] {
        isRoot ? [try runuser(), "-u", "postgres", "--", executable] + arguments : [executable] + arguments
    }

    private func appendConfiguration(_ lines: [String]) throws {
        let path = dataDirectory + "/postgresql.conf"
        guard let handle = FileHandle(forWritingAtPath: path) else {
            throw Failure(description: "cannot open \(path)")
        }
        defer { try? handle.close() }
        handle.seekToEndOfFile()
        handle.write(Data(("\n# parley tests\n" + lines.joined(separator: "\n") + "\n").utf8))
    }

    private func appendHostBasedAuthentication(_ lines: [String]) throws {
        let path = dataDirectory + "/pg_hba.conf"
        guard let handle = FileHandle(forWritingAtPath: path) else {
            throw Failure(description: "cannot open \(path)")
        }
        defer { try? handle.close() }
        handle.seekToEndOfFile()
        handle.write(Data(("\n# parley tests\n" + lines.joined(separator: "\n") + "\n").utf8))
    }

    // MARK: setup helpers

    /// `PARLEY_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin`, else `pg_ctl` on PATH.
    private static func findBinDirectory() throws -> String {
        let fm = FileManager.default
        func usable(_ dir: String) -> Bool {
            fm.isExecutableFile(atPath: dir + "/initdb") && fm.isExecutableFile(atPath: dir + "/pg_ctl")
        }
        if let configured = ProcessInfo.processInfo.environment["PARLEY_PG_BIN"], usable(configured) {
            return configured
        }
        let versions = ((try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap { name in Double(name).map { (name, $0) } }
            .sorted { $0.1 > $1.1 }
        for (name, _) in versions where usable("/usr/lib/postgresql/\(name)/bin") {
            return "/usr/lib/postgresql/\(name)/bin"
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for dir in path.split(separator: ":").map(String.init) where usable(dir) {
            return dir
        }
        throw Failure(
            description: "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin, "
                + "PARLEY_PG_BIN or PATH; install postgresql: scripts/install-deps.sh"
        )
    }

    private static func runuser() throws -> String {
        for candidate in ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw Failure(description: "running as root but runuser is missing; it is needed to start PostgreSQL as postgres")
    }

    /// A fresh `parley-pg-XXXXXX` directory under the temporary directory, owned by `postgres`
    /// when we are root.
    private static func makeDirectory() throws -> String {
        var template = Array((NSTemporaryDirectory() + "/parley-pg-XXXXXX").utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Failure(description: "cannot create a temporary directory")
        }
        let directory = URL(fileURLWithPath: String(cString: created)).standardizedFileURL.path
        if isRoot {
            guard let user = getpwnam("postgres") else {
                throw Failure(description: "running as root but there is no postgres user; install postgresql: scripts/install-deps.sh")
            }
            guard chown(directory, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
                throw Failure(description: "cannot hand \(directory) to the postgres user")
            }
        }
        return directory
    }

    // MARK: process-wide cleanup

    private static let sharedServer = Mutex<Task<PostgresServer, any Error>?>(nil)

    private struct Leftover: Sendable {
        let bin: String
        let data: String
    }

    /// Every server not yet destroyed, by directory; whatever is left is stopped at exit.
    private static let registry: Mutex<[String: Leftover]> = {
        atexit {
            let leftovers = PostgresServer.registry.withLock { registry in
                defer { registry.removeAll() }
                return registry
            }
            for (directory, server) in leftovers {
                PostgresServer.stopImmediately(binDirectory: server.bin, dataDirectory: server.data)
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
        return Mutex([:])
    }()
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34) and `…_addchdir_np` (2.29), which
/// the Swift Glibc module does not import; looked up at run time.
