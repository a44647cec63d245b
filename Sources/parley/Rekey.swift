import ArgumentParser
import Configuration
import Foundation
import Logging
import ParleyServer
import ParleyDomain
import Store

/// `parley rekey`: re-seals every sealed value under the first key of the ring, then says
/// which key ids are still in use. Progress goes to standard error, the result to standard output.
struct RekeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rekey",
        abstract: "Re-seal every sealed value under the first key of PARLEY_ENCRYPTION_KEYS, then list the key ids still in use.",
        discussion: """
            Reads PARLEY_DATABASE_URL and PARLEY_ENCRYPTION_KEYS (the new key first, the old ones after it). \
            Runs online, beside serving instances: each batch is one short transaction that locks only the rows \
            it re-seals, and skips rows another instance of rekey holds, so several may run at once. An \
            interrupted run loses nothing; running it again continues. Progress (rows done / to do per table) \
            goes to standard error; at the end, the count of sealed values per key id per table goes to standard \
            output, with the ring's keys no longer in use. A value that does not open with the ring is named by \
            table, row and column (never its content), the rest is still re-sealed, and the exit status is 1. \
            Procedure: docs/operations.md, "Key rotation".
            """)

    @Option(help: "Rows per transaction (1…5000).")
    var batchSize = 500

    @Option(help: "Stop after this many batches (to spread the work over several runs); a later run continues.")
    var maxBatches: Int?

    func validate() throws {
        guard Rekey.Options.batchSizes.contains(batchSize) else { throw ValidationError("--batch-size must be 1…5000") }
        if let maxBatches, maxBatches < 1 { throw ValidationError("--max-batches must be at least 1") }
    }

    func run() async throws {
        let reader = ParleyConfiguration.environmentReader()
        let logger = try makeLogger(reader)
        var failed = false
        try await runReportingConfiguration(logger: logger) {
            var problems: [String] = []
            let database: ParleyConfiguration.Database?
            do throws(ParleyConfiguration.Invalid) {
                database = try ParleyConfiguration.Database(reading: reader)
            } catch {
                problems += error.problems
                database = nil
            }
            let keys = reader.string(forKey: "parley.encryption_keys", isSecret: true) ?? ""
            let keyRing = Result { try Rekey.keyRing(parsing: keys) }
            if keys.isEmpty {
                problems.append("PARLEY_ENCRYPTION_KEYS is not set (the key to seal under first, then every key still in use)")
            } else if case .failure(let error) = keyRing {
                problems.append("\(error)")
            }
            guard problems.isEmpty, let database, case .success(let ring) = keyRing else { throw ParleyConfiguration.Invalid(problems: problems) }

            let store = PostgresStore(configuration: StoreConfiguration(connectionString: database.url, maxConnections: 2), logger: logger)
            do {
                failed = try await rekey(Rekey(store: store, keyRing: ring), store: store, migrations: database.migrations, logger: logger)
            } catch {
                await store.shutdown()
                throw error
            }
            await store.shutdown()
        }
        if failed { throw ExitCode.failure }
    }

    /// Returns whether something is left that an operator must see to (exit 1).
    private func rekey(_ rekey: Rekey, store: PostgresStore, migrations: MigrationSource, logger: Logger) async throws -> Bool {
        let pending = try await Migrator(store: store, source: migrations, logger: logger).pending()
        guard pending.isEmpty else {
            note("parley rekey: migrations are pending (\(pending.joined(separator: ", "))); run parley migrate first")
            return true
        }
        let unknown = try await rekey.sealedColumnsInSchema().map { $0.table + "." + $0.column }.filter { !Rekey.knownColumns.contains($0) }
        for column in unknown {
            note("parley rekey: \(column) is sealed but this parley does not re-seal it; use the parley that applied the latest migration")
        }

        note("parley rekey: sealing under '\(rekey.sealingKeyID)', \(batchSize) rows per batch")
        let report = try await rekey.run(
            options: Rekey.Options(batchSize: batchSize, maxBatches: maxBatches),
            counted: { report in
                note("to do: " + report.tables.map { "\($0) \(report.toDo[$0] ?? 0)" }.joined(separator: ", "))
            },
            progress: { progress in note("\(progress.table) \(progress.done)/\(progress.total)") })
        for failure in report.failures { note("cannot open: \(failure)") }
        if report.stoppedEarly { note("stopped after \(maxBatches ?? 0) batches (--max-batches); run parley rekey again to continue") }

        print(
            "resealed: "
                + report.tables.map { "\($0) \(report.done[$0] ?? 0)/\(max(report.toDo[$0] ?? 0, report.done[$0] ?? 0))" }
                .joined(separator: ", "))
        if !report.failures.isEmpty { print("values that did not open: \(report.failures.count) (listed on standard error)") }

        // A count per key id per table, over every sealed column of the schema.
        let uses = try await rekey.keysInUse()
        var perTable: [String: [String: Int]] = [:]
        for use in uses { perTable[use.table, default: [:]][use.keyID ?? "(malformed)", default: 0] += use.count }
        print("key ids in use (sealed values per table):")
        for table in perTable.keys.sorted() {
            for (kid, count) in perTable[table, default: [:]].sorted(by: { $0.key < $1.key }) { print("  \(table) \(kid) \(count)") }
        }
        let used = Set(uses.compactMap(\.keyID))
        let ring = rekey.keyIDs
        let retired = ring.dropFirst().filter { !used.contains($0) }
        let stillUsed = ring.dropFirst().filter { used.contains($0) }
        let outside = used.subtracting(ring).sorted()
        if !retired.isEmpty { print("no longer in use: " + retired.joined(separator: ", ")) }
        if !stillUsed.isEmpty { print("still in use besides '\(rekey.sealingKeyID)': " + stillUsed.joined(separator: ", ")) }
        if !outside.isEmpty { print("in use but not in the key ring: " + outside.joined(separator: ", ")) }
        return !report.failures.isEmpty || !unknown.isEmpty
    }
}

private func note(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
