import Foundation
import ParleyTesting
import Store
import Testing

@Suite struct MigratorTests {
    static let repositoryMigrations = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("migrations").path

    /// A temporary migrations directory with the given files.
    func directory(_ files: [String: String]) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("parley-migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        for (name, text) in files {
            try Data(text.utf8).write(to: url.appendingPathComponent(name))
        }
        return url.path
    }

    @Test func theRealMigrationsApplyOnce() async throws {
        try await withStore(try await freshDatabase()) { store in
            let migrator = Migrator(store: store, directory: Self.repositoryMigrations, logger: quietLogger)
            #expect(await !store.isReady(migrations: .directory(Self.repositoryMigrations)))
            let all = try Migrator.load(directory: Self.repositoryMigrations).map(\.name)
            #expect(all.first == "0001_initial.sql")
            #expect(try await migrator.pending() == all)
            #expect(try await migrator.migrate() == all)
            #expect(try await migrator.migrate() == [])
            #expect(try await migrator.pending() == [])
            #expect(await store.isReady(migrations: .directory(Self.repositoryMigrations)))
            let tables = try await store.query(
                "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('registrations', 'tokens', 'cookies', 'flows', 'audit_events')"
            )
            #expect(try tables.first?.int("n") == 5)
            let recorded = try #require(try await store.query("SELECT * FROM schema_migrations").first)
            #expect(try recorded.int("version") == 1)
            #expect(try recorded.string("checksum").count == 64)
            _ = try recorded.date("applied_at")
        }
    }

    @Test func concurrentInstancesApplyEachMigrationExactlyOnce() async throws {
        let migrations = try directory([
            "0001_counter.sql": "CREATE TABLE counter (applied_by int);",
            "0002_count.sql": "INSERT INTO counter VALUES (pg_backend_pid()); SELECT pg_sleep(0.2);",
            "0003_more.sql": "ALTER TABLE counter ADD COLUMN note text;",
        ])
        defer { try? FileManager.default.removeItem(atPath: migrations) }
        let database = try await freshDatabase()
        let applied = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<3 {
                group.addTask {
                    try await withStore(database, maxConnections: 2) { store in
                        try await Migrator(store: store, directory: migrations, logger: quietLogger).migrate()
                    }
                }
            }
            return try await group.reduce(into: [String]()) { $0 += $1 }
        }
        #expect(applied.sorted() == ["0001_counter.sql", "0002_count.sql", "0003_more.sql"])
        try await withStore(database) { store in
            #expect(try await store.query("SELECT count(*)::int AS n FROM counter").first?.int("n") == 1)
            let versions = try await store.query("SELECT version FROM schema_migrations ORDER BY version").map { try $0.int("version") }
            #expect(versions == [1, 2, 3])
        }
    }

    @Test func anEditedAppliedMigrationIsRefused() async throws {
        let migrations = try directory(["0001_first.sql": "CREATE TABLE first (id int);"])
        defer { try? FileManager.default.removeItem(atPath: migrations) }
        try await withStore(try await freshDatabase()) { store in
            let migrator = Migrator(store: store, directory: migrations, logger: quietLogger)
            #expect(try await migrator.migrate() == ["0001_first.sql"])
            try Data("CREATE TABLE first (id bigint);".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_first.sql"))
            try Data("CREATE TABLE second (id int);".utf8).write(to: URL(fileURLWithPath: migrations + "/0002_second.sql"))
            let error = await storeError { _ = try await migrator.migrate() }
            #expect(error?.code == .migration)
            #expect(error?.description.contains("migration 0001_first.sql was changed after it was applied") == true)
            #expect(await storeError { _ = try await migrator.pending() }?.code == .migration)
            #expect(await !store.isReady(migrations: .directory(migrations)))
            // Nothing after the edited migration was applied.
            #expect(try await store.query("SELECT to_regclass('second') IS NULL AS absent").first?.bool("absent") == true)
        }
    }

    @Test func aBadlyNamedFileIsRefused() async throws {
        for name in ["1-initial.sql", "0002_.sql", "0003_name.txt", "initial.sql", "0004_two words.sql"] {
            let migrations = try directory(["0001_fine.sql": "SELECT 1;", name: "SELECT 1;"])
            defer { try? FileManager.default.removeItem(atPath: migrations) }
            let error = await storeError { _ = try Migrator.load(directory: migrations) }
            #expect(error?.code == .migration)
            #expect(error?.description.contains(name) == true, "\(name)")
        }
        let clash = try directory(["0001_a.sql": "SELECT 1;", "01_b.sql": "SELECT 1;"])
        defer { try? FileManager.default.removeItem(atPath: clash) }
        #expect(await storeError { _ = try Migrator.load(directory: clash) }?.description.contains("share version 1") == true)
        // Hidden files are not migrations.
        let hidden = try directory(["0001_a.sql": "SELECT 1;", ".DS_Store": ""])
        defer { try? FileManager.default.removeItem(atPath: hidden) }
        #expect(try Migrator.load(directory: hidden).map(\.name) == ["0001_a.sql"])
    }
}
