package import AuthFlows
package import Foundation
public import ParleyCrypto
public import Store

/// `parley rekey`: re-seals every sealed column under the key ring's first key, online.
///
/// Each table is walked in primary-key order (keyset pagination), one short transaction
/// per batch. A batch selects only rows with a value sealed under another key and locks
/// them (`FOR NO KEY UPDATE SKIP LOCKED`: rows another rekey or a writer holds are left
/// for it or for the next pass; foreign-key checks are not blocked). Values are opened and
/// re-sealed with the same associated data inside the transaction that locked them, so a
/// row changed meanwhile is never overwritten with stale data. Several instances may run it
/// at once; an interrupted run rolls back its open batch and the next run continues where
/// the work is left. `updated_at` is not touched (cookie trimming orders by it).
///
/// A value that does not open is reported by table, row identity and column (never its
/// content) and left as it is; the rest is re-sealed.
public struct Rekey: Sendable {
    public struct Options: Sendable {
        /// Rows per transaction.
        public var batchSize: Int
        /// Stop after this many batches (nil: none); a later run continues.
        public var maxBatches: Int?

        public static let batchSizes = 1...5000

        public init(batchSize: Int = 500, maxBatches: Int? = nil) {
            self.batchSize = batchSize
            self.maxBatches = maxBatches
        }
    }

    /// After each batch: rows of `table` re-sealed by this run so far, of those found to do.
    public struct Progress: Sendable {
        public let table: String
        public let done: Int
        public let total: Int
    }

    /// A sealed value that did not open: where it is, and why (never what it holds).
    public struct Failure: Sendable, Hashable, CustomStringConvertible {
        public let table: String
        public let row: String
        public let column: String
        public let reason: String
        public var description: String { "\(table) \(row) \(column): \(reason)" }
    }

    /// How many values of one sealed column are sealed under one key id.
    public struct KeyUse: Sendable, Hashable {
        public let table: String
        public let column: String
        /// nil: the value is not a well-formed sealed value.
        public let keyID: String?
        public let count: Int
    }

    public struct Report: Sendable {
        /// Tables in the order they were worked on.
        public var tables: [String] = []
        /// Rows with a value under another key when the run started, per table.
        public var toDo: [String: Int] = [:]
        /// Rows this run re-sealed, per table.
        public var done: [String: Int] = [:]
        public var failures: [Failure] = []
        /// `--max-batches` ended the run before the work did.
        public var stoppedEarly = false
    }

    package let store: PostgresStore
    package let keyRing: KeyRing

    public init(store: PostgresStore, keyRing: KeyRing) {
        self.store = store
        self.keyRing = keyRing
    }

    /// `PARLEY_ENCRYPTION_KEYS` as a key ring (every problem in one error, no key material).
    public static func keyRing(parsing text: String) throws -> KeyRing { try KeyRing.parse(text) }

    /// The key values are sealed under from now on.
    public var sealingKeyID: String { keyRing.sealingKeyID }

    /// The ring's key ids, the sealing one first.
    public var keyIDs: [String] { keyRing.keys.map(\.id) }

    /// Every sealed column this Parley knows, by table, with the associated data that binds
    /// each value to its row. A migration that adds a `*_sealed` column adds it here
    /// (`RekeyTests` compares this list with the schema).
    package static let tables: [SealedTable] = [
        SealedTable(
            name: "registrations", key: [.init("id", .uuid)], context: [],
            columns: [
                SealedColumn("appcid_sealed") { SealBinding.appcid(try $0.uuid("id")) },
                SealedColumn("credentials_sealed") { SealBinding.credentials(try $0.uuid("id")) },
                SealedColumn("identity_token_sealed") { SealBinding.identityToken(try $0.uuid("id")) },
                SealedColumn("client_certificate_sealed") { SealBinding.clientCertificate(try $0.uuid("id")) },
            ]),
        SealedTable(
            name: "tokens", key: [.init("id", .uuid)], context: ["destination", "registration_id", "scope_key"],
            columns: [
                SealedColumn("access_token_sealed") { ConnectionTokens.binding(try tokenKey($0), "access") },
                SealedColumn("refresh_token_sealed") { ConnectionTokens.binding(try tokenKey($0), "refresh") },
            ]),
        SealedTable(
            name: "cookies",
            key: [.init("registration_id", .uuid), .init("domain", .text), .init("path", .text), .init("name", .text)],
            context: [],
            columns: [
                SealedColumn("value_sealed") {
                    SealBinding.cookie(
                        try $0.uuid("registration_id").uuidString.lowercased(), try $0.string("domain"), try $0.string("path"),
                        try $0.string("name"))
                }
            ]),
        SealedTable(
            name: "flows", key: [.init("id", .uuid)], context: [],
            columns: [
                SealedColumn("secret_sealed") { SealBinding.flowSecret(try $0.uuid("id").uuidString.lowercased()) },
                SealedColumn("kind_state_sealed") { SealBinding.flowKindState(try $0.uuid("id").uuidString.lowercased()) },
                SealedColumn("staged_cookies_sealed") { SealBinding.flowStagedCookies(try $0.uuid("id").uuidString.lowercased()) },
                // Written only by instances before migration 0006; re-sealed so no value is left under a retired key.
                SealedColumn("pkce_verifier_sealed") { SealBinding.pkceVerifier(try $0.uuid("id").uuidString.lowercased()) },
            ]),
    ]

    private static func tokenKey(_ row: Row) throws -> TokenKey {
        TokenKey(
            destination: try row.string("destination"), registrationID: try row.optionalUUID("registration_id")?.uuidString.lowercased(),
            scopeKey: try row.string("scope_key"))
    }

    /// The table and column names this Parley re-seals (`table.column`).
    public static var knownColumns: Set<String> {
        Set(tables.flatMap { table in table.columns.map { table.name + "." + $0.name } })
    }

    // MARK: running

    /// Re-seals every table. `counted` gets the report with the rows to do, before any work;
    /// `progress` is called after each batch that found rows.
    public func run(
        options: Options = Options(), counted: (Report) -> Void = { _ in }, progress: (Progress) -> Void = { _ in }
    ) async throws -> Report {
        let batchSize = min(max(options.batchSize, Options.batchSizes.lowerBound), Options.batchSizes.upperBound)
        var report = Report()
        for table in Self.tables {
            report.tables.append(table.name)
            report.toDo[table.name] = try await countToDo(table)
            report.done[table.name] = 0
        }
        counted(report)
        var batches = 0
        var failed = Set<Failure>()
        tables: for table in Self.tables {
            var done = 0
            // Rows skipped because they were locked (by a writer or another rekey) get another
            // pass; when a pass found nothing it could take, the next waits a little for the holder.
            var pause = Duration.milliseconds(50)
            for _ in 0..<10 {
                var resealedThisPass = 0
                var after: [KeyValue]? = nil
                while true {
                    if let limit = options.maxBatches, batches >= limit {
                        report.stoppedEarly = true
                        break tables
                    }
                    let batch = try await reseal(table, after: after, limit: batchSize)
                    batches += 1
                    for failure in batch.failures where failed.insert(failure).inserted { report.failures.append(failure) }
                    done += batch.resealed
                    resealedThisPass += batch.resealed
                    report.done[table.name] = done
                    if batch.found > 0 {
                        progress(Progress(table: table.name, done: done, total: max(report.toDo[table.name] ?? 0, done)))
                    }
                    guard batch.found == batchSize, let last = batch.lastKey else { break }
                    after = last
                }
                // Rows whose values do not open stay to do; nothing else should.
                let unopened = Set(failed.filter { $0.table == table.name }.map(\.row)).count
                if try await countToDo(table) <= unopened { break }
                if resealedThisPass == 0 {
                    try await Task.sleep(for: pause)
                    pause = min(pause * 2, .seconds(1))
                }
            }
        }
        return report
    }

    /// Rows of `table` with at least one value sealed under another key than the first.
    package func countToDo(_ table: SealedTable) async throws -> Int {
        let rows = try await store.query("SELECT count(*) AS n FROM " + table.quotedName + " WHERE " + needsResealing(table))
        return try rows.first?.int("n") ?? 0
    }

    package struct Batch {
        package var found = 0
        package var resealed = 0
        package var failures: [Failure] = []
        package var lastKey: [KeyValue]?
    }

    /// One transaction: lock up to `limit` rows after `after` that need it, re-seal, write back.
    package func reseal(_ table: SealedTable, after: [KeyValue]?, limit: Int) async throws -> Batch {
        try await store.withTransaction { connection in
            var select: SQL = "SELECT "
            select.append(SQL(unsafeSQL: (table.key.map(\.name) + table.context + table.columns.map(\.name)).map(quoted).joined(separator: ", ")))
            select.append(" FROM " + table.quotedName + " WHERE ")
            if let after {
                select.append(table.keyTuple(prefix: nil) + " > " + KeyValue.tuple(after) + " AND ")
            }
            select.append(needsResealing(table))
            select.append(" ORDER BY " + SQL(unsafeSQL: table.key.map { quoted($0.name) }.joined(separator: ", ")))
            select.append(" LIMIT \(limit) FOR NO KEY UPDATE SKIP LOCKED")
            let rows = try await connection.query(select)

            var batch = Batch(found: rows.count)
            var updates: [(key: [KeyValue], values: [[UInt8]?])] = []
            for row in rows {
                let key = try table.keyValues(of: row)
                batch.lastKey = key
                var values: [[UInt8]?] = []
                var changed = false
                for column in table.columns {
                    guard let sealed = try row.optionalBytes(column.name), !keyRing.isSealedWithFirstKey(sealed) else {
                        values.append(nil)
                        continue
                    }
                    do {
                        let associatedData = try column.associatedData(row)
                        let plaintext = try keyRing.open(sealed, associatedData: associatedData)
                        values.append(keyRing.seal(plaintext, associatedData: associatedData))
                        changed = true
                    } catch let error as SealingError {
                        values.append(nil)
                        batch.failures.append(Failure(table: table.name, row: table.describe(key), column: column.name, reason: error.detail))
                    }
                }
                if changed { updates.append((key, values)) }
            }
            guard !updates.isEmpty else { return batch }

            // UPDATE t SET c = COALESCE(v.c, t.c) … FROM (VALUES (…), …) AS v(k0…, c0…) WHERE t.k = v.k …
            var update: SQL = "UPDATE " + table.quotedName + " AS t SET "
            update.append(
                SQL(
                    unsafeSQL: table.columns.enumerated().map { i, column in
                        "\(quoted(column.name)) = COALESCE(v.c\(i), t.\(quoted(column.name)))"
                    }.joined(separator: ", ")))
            update.append(" FROM (VALUES ")
            for (n, entry) in updates.enumerated() {
                update.append(n == 0 ? "(" : ", (")
                for (i, value) in entry.key.enumerated() {
                    if i > 0 { update.append(", ") }
                    update.append(value.sql)
                }
                for value in entry.values { update.append(", \(value)::bytea") }
                update.append(")")
            }
            let aliases = table.key.indices.map { "k\($0)" } + table.columns.indices.map { "c\($0)" }
            update.append(SQL(unsafeSQL: ") AS v(" + aliases.joined(separator: ", ") + ") WHERE "))
            update.append(
                SQL(unsafeSQL: table.key.enumerated().map { i, key in "t.\(quoted(key.name)) = v.k\(i)" }.joined(separator: " AND ")))
            batch.resealed = try await connection.execute(update)
            return batch
        }
    }

    /// `(c1 IS NOT NULL AND substring(c1, 1, n) <> prefix) OR …`: a value sealed under another key.
    package func needsResealing(_ table: SealedTable) -> SQL {
        let prefix = keyRing.sealingPrefix
        var sql: SQL = "("
        for (i, column) in table.columns.enumerated() {
            if i > 0 { sql.append(" OR ") }
            let name = quoted(column.name)
            sql.append(
                SQL(unsafeSQL: "(\(name) IS NOT NULL AND substring(\(name), 1, \(prefix.count)) <> ") + "\(prefix))")
        }
        sql.append(")")
        return sql
    }

    // MARK: key ids in use

    /// Every `*_sealed` bytea column of the schema (whether or not this Parley knows it),
    /// as `table.column`.
    public func sealedColumnsInSchema() async throws -> [(table: String, column: String)] {
        try await store.query(
            """
            SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = current_schema() AND data_type = 'bytea' AND column_name LIKE '%\\_sealed'
            ORDER BY table_name, column_name
            """
        ).map { (try $0.string("table_name"), try $0.string("column_name")) }
    }

    /// How many values of every sealed column of the schema each key id sealed.
    public func keysInUse() async throws -> [KeyUse] {
        var uses: [KeyUse] = []
        for (table, column) in try await sealedColumnsInSchema() {
            let c = quoted(column)
            // Nested WHENs are evaluated in order: get_byte never sees a value too short for it.
            let rows = try await store.query(
                SQL(
                    unsafeSQL: """
                        SELECT CASE WHEN length(\(c)) < 2 THEN NULL WHEN get_byte(\(c), 0) <> 1 THEN NULL
                            WHEN length(\(c)) < 2 + get_byte(\(c), 1) THEN NULL
                            ELSE substring(\(c), 3, get_byte(\(c), 1)) END AS kid, count(*) AS n
                        FROM \(quoted(table)) WHERE \(c) IS NOT NULL GROUP BY 1 ORDER BY 1
                        """))
            for row in rows {
                let kid = try row.optionalBytes("kid").map { String(decoding: $0, as: UTF8.self) }
                uses.append(KeyUse(table: table, column: column, keyID: kid, count: try row.int("n")))
            }
        }
        return uses
    }
}

// MARK: - tables

/// A table with sealed columns: its primary key (for keyset pagination and the write-back),
/// the further columns the associated data needs, and the sealed columns.
package struct SealedTable: Sendable {
    package struct KeyColumn: Sendable {
        package enum Kind: Sendable { case uuid, text }
        package let name: String
        package let kind: Kind
        package init(_ name: String, _ kind: Kind) {
            self.name = name
            self.kind = kind
        }
    }

    package let name: String
    package let key: [KeyColumn]
    package let context: [String]
    package let columns: [SealedColumn]

    package var quotedName: SQL { SQL(unsafeSQL: quoted(name)) }

    package func keyTuple(prefix: String?) -> SQL {
        SQL(unsafeSQL: "(" + key.map { (prefix.map { $0 + "." } ?? "") + quoted($0.name) }.joined(separator: ", ") + ")")
    }

    package func keyValues(of row: Row) throws -> [KeyValue] {
        try key.map { column in
            switch column.kind {
            case .uuid: .uuid(try row.uuid(column.name))
            case .text: .text(try row.string(column.name))
            }
        }
    }

    /// The row's identity for a report: `id=…`, or every key column for composite keys.
    package func describe(_ values: [KeyValue]) -> String {
        zip(key, values).map { column, value in "\(column.name)=\(value.text)" }.joined(separator: " ")
    }
}

package struct SealedColumn: Sendable {
    package let name: String
    package let associatedData: @Sendable (Row) throws -> String

    package init(_ name: String, _ associatedData: @escaping @Sendable (Row) throws -> String) {
        self.name = name
        self.associatedData = associatedData
    }
}

package enum KeyValue: Sendable, Hashable {
    case uuid(UUID)
    case text(String)

    package var sql: SQL {
        switch self {
        case .uuid(let id): "\(id)::uuid"
        case .text(let text): "\(text)::text"
        }
    }

    package var text: String {
        switch self {
        case .uuid(let id): id.uuidString.lowercased()
        case .text(let text): text
        }
    }

    package static func tuple(_ values: [KeyValue]) -> SQL {
        var sql: SQL = "("
        for (i, value) in values.enumerated() {
            if i > 0 { sql.append(", ") }
            sql.append(value.sql)
        }
        sql.append(")")
        return sql
    }
}

/// An identifier as PostgreSQL reads it, quoted.
private func quoted(_ identifier: String) -> String {
    "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}
