import ParleyEncoding
import Foundation
public import Logging
import ParleyCrypto

/// Where migrations come from: a directory of `NNNN_name.sql` files, or the copies
/// compiled into the binary (the default, so a release binary runs from any directory).
public enum MigrationSource: Sendable {
    case directory(String)
    case embedded([(name: String, sql: String)])

    public func migrations() throws -> [Migrator.Migration] {
        switch self {
        case .directory(let path): try Migrator.load(directory: path)
        case .embedded(let files): try Migrator.load(embedded: files)
        }
    }
}

/// Applies `NNNN_name.sql` migrations in numeric order.
///
/// Each migration runs in its own transaction, together with its row in `schema_migrations`
/// (version, name, SHA-256 checksum, time). Every step holds a transaction-scoped advisory lock,
/// so any number of instances may migrate at once: each migration is applied exactly once and
/// the others see it applied. An applied migration whose file changed stops everything, naming
/// the file.
public struct Migrator: Sendable {
    /// One migration file.
    public struct Migration: Sendable, Equatable {
        public let version: Int
        /// The file name, e.g. `0001_initial.sql`.
        public let name: String
        public let sql: String
        /// Lower-case hex SHA-256 of the file's bytes.
        public let checksum: String
    }

    /// `pg_advisory_xact_lock` key shared by every Parley instance ("parley" in ASCII).
    static let lockKey: Int64 = 0x7061_726c_6579

    public let store: PostgresStore
    public let source: MigrationSource
    let logger: Logger

    public init(store: PostgresStore, source: MigrationSource, logger: Logger) {
        self.store = store
        self.source = source
        self.logger = logger
    }

    public init(store: PostgresStore, directory: String, logger: Logger) {
        self.init(store: store, source: .directory(directory), logger: logger)
    }

    /// Applies every pending migration; returns the names of those this call applied (empty when
    /// another instance got there first or nothing was pending).
    @discardableResult
    public func migrate() async throws -> [String] {
        let migrations = try source.migrations()
        var applied: [String] = []
        while true {
            // One step per transaction: lock, look, apply the first pending migration, record it.
            let step: String? = try await store.withTransaction { connection in
                try await connection.execute("SELECT pg_advisory_xact_lock(\(Self.lockKey))")
                try await connection.execute(
                    """
                    CREATE TABLE IF NOT EXISTS schema_migrations (
                        version    integer PRIMARY KEY,
                        name       text NOT NULL,
                        checksum   text NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now()
                    )
                    """)
                let recorded = try await Self.recorded(connection)
                guard let next = try Self.pending(migrations, recorded: recorded).first else { return nil }
                logger.info("applying migration", metadata: ["migration.name": "\(next.name)"])
                try await connection.executeScript(unsafeSQL: next.sql)
                try await connection.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(next.version), \(next.name), \(next.checksum))"
                )
                return next.name
            }
            guard let step else { break }
            applied.append(step)
        }
        return applied
    }

    /// The names of the migrations not applied yet. Throws when an applied one was changed.
    public func pending() async throws -> [String] {
        let migrations = try source.migrations()
        let recorded = try await store.withConnection { connection in
            let exists = try await connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
            guard try exists.first?.bool("present") == true else { return [Int: Recorded]() }
            return try await Self.recorded(connection)
        }
        return try Self.pending(migrations, recorded: recorded).map(\.name)
    }

    struct Recorded {
        let name: String
        let checksum: String
    }

    static func recorded(_ connection: PostgresConnection) async throws -> [Int: Recorded] {
        var recorded: [Int: Recorded] = [:]
        for row in try await connection.query("SELECT version, name, checksum FROM schema_migrations") {
            recorded[try row.int("version")] = Recorded(name: try row.string("name"), checksum: try row.string("checksum"))
        }
        return recorded
    }

    /// The migrations still to apply, after checking the applied ones are unchanged.
    static func pending(_ migrations: [Migration], recorded: [Int: Recorded]) throws -> [Migration] {
        var pending: [Migration] = []
        for migration in migrations {
            guard let applied = recorded[migration.version] else {
                pending.append(migration)
                continue
            }
            guard applied.checksum == migration.checksum else {
                throw StoreError.migration(
                    "migration \(migration.name) was changed after it was applied "
                        + "(checksum recorded \(applied.checksum), file now \(migration.checksum)); "
                        + "restore the file and add a new migration instead"
                )
            }
            guard applied.name == migration.name else {
                throw StoreError.migration(
                    "migration version \(migration.version) was applied as \(applied.name) but the file is now named \(migration.name)"
                )
            }
        }
        return pending
    }

    // MARK: files

    /// Reads and checks every migration file in `directory`, in version order. Hidden files are
    /// skipped; any other name that is not `NNNN_name.sql` is an error, as are two files with one
    /// version.
    public static func load(directory: String) throws -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw StoreError.migration("cannot read the migrations directory \(directory)")
        }
        var migrations: [Migration] = []
        for name in names.sorted() where !name.hasPrefix(".") {
            guard let version = version(ofFileName: name) else {
                throw StoreError.migration(
                    "\(name) in \(directory) is not a migration file name; expected NNNN_name.sql (digits, an underscore, letters, digits, _ or -)"
                )
            }
            let path = (directory as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else {
                throw StoreError.migration("cannot read migration \(name)")
            }
            guard let sql = String(data: data, encoding: .utf8) else {
                throw StoreError.migration("migration \(name) is not UTF-8 text")
            }
            if let clash = migrations.first(where: { $0.version == version }) {
                throw StoreError.migration("migrations \(clash.name) and \(name) share version \(version)")
            }
            migrations.append(Migration(version: version, name: name, sql: sql, checksum: Hex.encode(SHA256.hash(data))))
        }
        return migrations.sorted { $0.version < $1.version }
    }

    /// Checks migrations compiled into the binary (name and text), as `load(directory:)` checks files.
    public static func load(embedded files: [(name: String, sql: String)]) throws -> [Migration] {
        var migrations: [Migration] = []
        for (name, sql) in files {
            guard let version = version(ofFileName: name) else {
                throw StoreError.migration("\(name) is not a migration file name; expected NNNN_name.sql")
            }
            if let clash = migrations.first(where: { $0.version == version }) {
                throw StoreError.migration("migrations \(clash.name) and \(name) share version \(version)")
            }
            migrations.append(Migration(version: version, name: name, sql: sql, checksum: Hex.encode(SHA256.hash(Array(sql.utf8)))))
        }
        return migrations.sorted { $0.version < $1.version }
    }

    /// `0001_initial.sql` → 1; nil for anything else.
    static func version(ofFileName name: String) -> Int? {
        guard name.hasSuffix(".sql") else { return nil }
        let stem = name.dropLast(4)
        guard let underscore = stem.firstIndex(of: "_") else { return nil }
        let digits = stem[..<underscore]
        let label = stem[stem.index(after: underscore)...]
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
            !label.isEmpty,
            label.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") })
        else { return nil }
        return Int(digits)
    }
}
