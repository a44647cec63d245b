import Foundation
import ParleyTesting
import Store
import Synchronization
import Testing

/// Against a real PostgreSQL (the process-wide test server, one fresh database per test).
@Suite struct PostgresStoreTests {
    @Test func valuesAreBoundNeverSpliced() async throws {
        try await withStore(try await freshDatabase()) { store in
            try await store.execute("CREATE TABLE t (id serial PRIMARY KEY, s text)")
            let hostile = "x'); DROP TABLE t; --"
            try await store.execute("INSERT INTO t (s) VALUES (\(hostile))")
            let rows = try await store.query("SELECT s FROM t WHERE s = \(hostile)")
            #expect(rows.count == 1)
            #expect(try rows.first?.string("s") == hostile)
            // Quotes, backslashes and non-ASCII text survive as well.
            let tricky = "it's \\x00 \"quoted\" 💥 $1 ;"
            let echoed = try await store.query("SELECT \(tricky)::text AS v")
            #expect(try echoed.first?.string("v") == tricky)
        }
    }

    @Test func everyTypeRoundTripsIncludingNulls() async throws {
        try await withStore(try await freshDatabase()) { store in
            try await store.execute(
                """
                CREATE TABLE everything (
                    k text PRIMARY KEY, s text, i bigint, i32 integer, b boolean, d double precision,
                    bytes bytea, at timestamptz, u uuid, j jsonb
                )
                """)
            let at = Date(timeIntervalSince1970: 1_700_000_000.123456)
            let id = UUID()
            let bytes = (0...255).map(UInt8.init) + [0, 0]
            try await store.execute(
                """
                INSERT INTO everything VALUES (
                    'full', \("text"), \(Int.max), \(Int32.min), \(true), \(0.1), \(bytes), \(at), \(id), \("{\"a\": [1]}")
                )
                """)
            let none: String? = nil
            let noInt: Int? = nil
            let noInt32: Int32? = nil
            let noBool: Bool? = nil
            let noDouble: Double? = nil
            let noBytes: [UInt8]? = nil
            let noDate: Date? = nil
            let noUUID: UUID? = nil
            try await store.execute(
                """
                INSERT INTO everything VALUES (
                    'empty', \(none), \(noInt), \(noInt32), \(noBool), \(noDouble), \(noBytes), \(noDate), \(noUUID), \(none)
                )
                """)
            try await store.execute("INSERT INTO everything (k, i, bytes, at) VALUES ('edges', \(Int64.min), \([UInt8]()), \(Date(timeIntervalSince1970: -86_400.5)))")

            let full = try #require(try await store.query("SELECT * FROM everything WHERE k = 'full'").first)
            #expect(try full.string("s") == "text")
            #expect(try full.int("i") == Int.max)
            #expect(try full.int32("i32") == Int32.min)
            #expect(try full.bool("b"))
            #expect(try full.double("d") == 0.1)
            #expect(try full.bytes("bytes") == bytes)
            #expect(abs(try full.date("at").timeIntervalSince(at)) < 1e-6)
            #expect(try full.uuid("u") == id)
            #expect(try full.string("j") == "{\"a\": [1]}")

            let empty = try #require(try await store.query("SELECT * FROM everything WHERE k = 'empty'").first)
            #expect(try empty.optionalString("s") == nil)
            #expect(try empty.optionalInt("i") == nil)
            #expect(try empty.optionalInt32("i32") == nil)
            #expect(try empty.optionalBool("b") == nil)
            #expect(try empty.optionalDouble("d") == nil)
            #expect(try empty.optionalBytes("bytes") == nil)
            #expect(try empty.optionalDate("at") == nil)
            #expect(try empty.optionalUUID("u") == nil)
            #expect(try empty.isNull("j"))

            let edges = try #require(try await store.query("SELECT * FROM everything WHERE k = 'edges'").first)
            #expect(try edges.int64("i") == Int64.min)
            #expect(try edges.bytes("bytes") == [])
            #expect(try edges.date("at") == Date(timeIntervalSince1970: -86_400.5))

            // Server-side values decode too.
            let now = try #require(try await store.query("SELECT now() AS at, gen_random_uuid() AS u").first)
            #expect(abs(try now.date("at").timeIntervalSinceNow) < 60)
            _ = try now.uuid("u")
        }
    }

    @Test func typeMismatchesNameTheColumnButNotTheValue() async throws {
        try await withStore(try await freshDatabase()) { store in
            let row = try #require(try await store.query("SELECT 'confidential'::text AS s, NULL::int AS n").first)
            let mismatch = await storeError { _ = try row.int("s") }
            #expect(mismatch?.code == .decoding)
            #expect(mismatch?.description.contains("\"s\"") == true)
            #expect(mismatch?.description.contains("confidential") == false)
            #expect(await storeError { _ = try row.int("n") }?.code == .decoding)
            #expect(await storeError { _ = try row.string("missing") }?.code == .decoding)
        }
    }

    @Test func transactionsCommitOrRollBack() async throws {
        struct Abort: Error {}
        try await withStore(try await freshDatabase(), maxConnections: 1) { store in
            try await store.execute("CREATE TABLE t (k text PRIMARY KEY)")
            await #expect(throws: Abort.self) {
                try await store.withTransaction { connection in
                    try await connection.execute("INSERT INTO t VALUES ('rolled back')")
                    throw Abort()
                }
            }
            let count = try await store.withTransaction { connection in
                try await connection.execute("INSERT INTO t VALUES ('committed')")
                return try await connection.query("SELECT count(*)::int AS n FROM t").first?.int("n")
            }
            #expect(count == 1)
            // A failed statement inside the transaction rolls back everything before it.
            let error = await storeError {
                try await store.withTransaction { connection in
                    try await connection.execute("INSERT INTO t VALUES ('also rolled back')")
                    try await connection.execute("INSERT INTO t VALUES ('committed')")
                }
            }
            #expect(error?.code == .uniqueViolation)
            let keys = try await store.query("SELECT k FROM t ORDER BY k").map { try $0.string("k") }
            #expect(keys == ["committed"])
            // The single connection went back to the pool in a usable state.
            #expect(store.statistics.open == 1)
        }
    }

    @Test func queryErrorsAreNotUnavailability() async throws {
        try await withStore(try await freshDatabase()) { store in
            try await store.execute("CREATE TABLE u (k text PRIMARY KEY)")
            let secret = "secret-value-4711"
            try await store.execute("INSERT INTO u VALUES (\(secret))")
            let duplicate = await storeError { try await store.execute("INSERT INTO u VALUES (\(secret))") }
            #expect(duplicate?.code == .uniqueViolation)
            #expect(duplicate?.sqlState == "23505")
            #expect(duplicate?.constraint == "u_pkey")
            #expect(duplicate?.description.contains(secret) == false)
            #expect(duplicate?.description.contains("INSERT") == false)
            #expect(duplicate?.debugDescription.contains("duplicate key") == true)

            let syntax = await storeError { try await store.execute("SELEC 1") }
            #expect(syntax?.code == .query)
            #expect(syntax?.sqlState == "42601")

            let badInput = await storeError { _ = try await store.query("SELECT \(secret)::int AS n") }
            #expect(badInput?.code == .query)
            #expect(badInput?.description.contains(secret) == false)

            // The pool is fine afterwards.
            #expect(try await store.query("SELECT 1 AS one").first?.int("one") == 1)
        }
    }

    @Test func fiftyCallersShareFourConnections() async throws {
        let database = try await freshDatabase()
        let application = "pool_bound_\(UInt32.random(in: 0...UInt32.max))"
        try await withStore(database + "&application_name=\(application)", maxConnections: 4, acquireTimeout: .seconds(30)) { store in
            let mostSeen = Locked(0)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        try await store.withConnection { connection in
                            let rows = try await connection.query(
                                """
                                SELECT count(*)::int AS n, pg_sleep(0.01)::text AS slept
                                FROM pg_stat_activity WHERE application_name = \(application)
                                """)
                            let seen = try rows.first?.int("n") ?? 0
                            mostSeen.withLock { $0 = max($0, seen) }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let statistics = store.statistics
            #expect(mostSeen.withLock { $0 } <= 4)
            #expect(mostSeen.withLock { $0 } >= 1)
            #expect(statistics.peakOpen <= 4)
            #expect(statistics.waiting == 0)
            measured("pool: 50 callers, max 4: peak open \(statistics.peakOpen), most seen in pg_stat_activity \(mostSeen.withLock { $0 })")
        }
    }

    @Test func waitingLongerThanTheAcquireTimeoutIsUnavailable() async throws {
        try await withStore(try await freshDatabase(), maxConnections: 1, acquireTimeout: .milliseconds(300)) { store in
            try await whileHoldingTheOnlyConnection(of: store) {
                let start = ContinuousClock.now
                let error = await storeError { _ = try await store.query("SELECT 1 AS one") }
                let waited = ContinuousClock.now - start
                #expect(error?.code == .unavailable)
                #expect(waited >= .milliseconds(250))
                #expect(waited < .seconds(2))
            }
            #expect(try await store.query("SELECT 1 AS one").first?.int("one") == 1)
        }
    }

    @Test func aCancelledWaiterLeavesTheQueue() async throws {
        try await withStore(try await freshDatabase(), maxConnections: 1, acquireTimeout: .seconds(30)) { store in
            try await whileHoldingTheOnlyConnection(of: store) {
                let waiter = Task { try await store.query("SELECT 1 AS one") }
                try await eventually("the waiter to queue") { store.statistics.waiting == 1 }
                waiter.cancel()
                await #expect(throws: CancellationError.self) { _ = try await waiter.value }
                #expect(store.statistics.waiting == 0)
            }
        }
    }

    @Test func shutdownRefusesLaterCalls() async throws {
        let store = PostgresStore(
            configuration: StoreConfiguration(connectionString: try await freshDatabase()), logger: quietLogger
        )
        _ = try await store.query("SELECT 1 AS one")
        await store.shutdown()
        #expect(store.statistics.open == 0)
        #expect(await storeError { _ = try await store.query("SELECT 1 AS one") }?.code == .unavailable)
    }

    @Test func anUnreachableDatabaseIsUnavailable() async throws {
        let server = try await PostgresServer.shared()
        let error = await storeError {
            try await withStore(server.connectionString(database: "no_such_database")) { store in
                _ = try await store.query("SELECT 1 AS one")
            }
        }
        #expect(error?.code == .unavailable)
    }

    /// Runs `body` while another task holds the pool's only connection, then lets it go.
    private func whileHoldingTheOnlyConnection(of store: PostgresStore, _ body: () async throws -> Void) async throws {
        let (held, holding) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await store.withConnection { _ in
                    holding.yield()
                    for await _ in released { break }
                }
            }
            for await _ in held { break }
            do {
                try await body()
            } catch {
                release.yield()
                throw error
            }
            release.yield()
            try await group.waitForAll()
        }
    }
}
