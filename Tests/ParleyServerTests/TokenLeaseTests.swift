import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Testing

/// The token store's exclusive section against a real PostgreSQL: it holds a lease row,
/// not a transaction, and a lease whose holder died is taken over once it lapses.
@Suite(.serialized) struct TokenLeaseTests {
    static func withTokens<T: Sendable>(
        leaseDuration: Duration, _ body: @Sendable (PostgresTokens, PostgresStore) async throws -> T
    ) async throws -> T {
        let postgres = try await PostgresServer.shared()
        let url = try await postgres.createDatabase()
        return try await withPostgresStore(StoreConfiguration(connectionString: url, maxConnections: 2)) { store in
            _ = try await Migrator(store: store, source: .embedded(EmbeddedMigrations.files), logger: quietLogger).migrate()
            return try await body(PostgresTokens(store: store, keyRing: testKeyRing(), leaseDuration: leaseDuration), store)
        }
    }

    static let key = TokenKey(destination: "as", registrationID: nil, scopeKey: "default")

    @Test func aSectionHoldsNoConnectionWhileItWaitsOnTheNetwork() async throws {
        try await Self.withTokens(leaseDuration: .seconds(30)) { tokens, store in
            // The pool has 2 connections; a section that waits inside its body (the token
            // endpoint call) must leave both free for everyone else.
            try await tokens.exclusively(Self.key) { access in
                #expect(try await access.load(Self.key) == nil)
                let rows = try await store.query("SELECT owner FROM token_leases WHERE lock_key = \(Self.key.description)")
                #expect(rows.count == 1)
                async let a = store.query("SELECT 1 AS one")
                async let b = store.query("SELECT 2 AS two")
                _ = try await (a, b)
                try await access.save(StoredToken(accessToken: "at", refreshToken: "rt", expiresAt: nil), for: Self.key, grant: .clientCredentials)
            }
            #expect(try await store.query("SELECT 1 FROM token_leases").isEmpty)
            #expect(try await tokens.load(Self.key)?.accessToken == "at")
        }
    }

    @Test func aDeadHoldersLeaseIsTakenOverWhenItLapses() async throws {
        try await Self.withTokens(leaseDuration: .seconds(1)) { tokens, store in
            // An instance killed while it held the lease left this row behind.
            try await store.execute(
                "INSERT INTO token_leases (lock_key, owner, expires_at) VALUES (\(Self.key.description), 'dead', now() + interval '1 second')")
            let clock = ContinuousClock()
            let started = clock.now
            let entered = try await tokens.exclusively(Self.key) { _ in clock.now }
            #expect(entered - started >= .milliseconds(500))
            #expect(entered - started < .seconds(10))
            #expect(try await store.query("SELECT 1 FROM token_leases").isEmpty)
        }
    }

    @Test func sectionsOnOneKeyNeverOverlap() async throws {
        try await Self.withTokens(leaseDuration: .seconds(30)) { tokens, _ in
            let inside = InsideCounter()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        try await tokens.exclusively(Self.key) { _ in
                            inside.enter()
                            await Task.yield()
                            inside.leave()
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(inside.maximum == 1)
        }
    }

    /// Two instances' batches of `last_used_at` over the same rows never deadlock: each writes
    /// in one order, whatever order its dictionary iterates in (the soak saw SQLSTATE 40P01).
    @Test func usageBatchesOverTheSameRowsNeverDeadlock() async throws {
        try await Self.withTokens(leaseDuration: .seconds(30)) { tokens, _ in
            let keys = (0..<60).map { TokenKey(destination: "as", registrationID: nil, scopeKey: "scope-\($0)") }
            for key in keys {
                try await tokens.exclusively(key) { access in
                    try await access.save(StoredToken(accessToken: "at", refreshToken: nil, expiresAt: nil), for: key, grant: .clientCredentials)
                }
            }
            // Dictionaries of different capacities iterate the same keys in different orders.
            for round in 0..<10 {
                let at = Date(timeIntervalSince1970: 1_800_000_000 + Double(round))
                var small = [TokenKey: Date]()
                var large = [TokenKey: Date](minimumCapacity: 4096)
                for key in keys { small[key] = at }
                for key in keys.reversed() { large[key] = at.addingTimeInterval(0.5) }
                async let a: Void = tokens.markUsed(small)
                async let b: Void = tokens.markUsed(large)
                _ = try await (a, b)
            }
        }
    }
}

final class InsideCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var current = 0
    private(set) var maximum = 0

    func enter() {
        lock.lock()
        current += 1
        maximum = max(maximum, current)
        lock.unlock()
    }

    func leave() {
        lock.lock()
        current -= 1
        lock.unlock()
    }
}
