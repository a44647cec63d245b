public import Foundation
public import Store

/// The instances of a cluster (`instances`): each says it is alive, and learns how many are.
public protocol InstanceRepository: Sendable {
    /// Records instance `id` as alive now and returns how many instances were seen within `window`
    /// (this one included), by the database's clock.
    func beat(id: UUID, window: Duration) async throws -> Int
    /// Instance `id` stops.
    func leave(id: UUID) async throws
}

/// One process alone (the in-memory tier): it is the whole cluster.
public struct SingleInstance: InstanceRepository {
    public init() {}
    public func beat(id: UUID, window: Duration) async throws -> Int { 1 }
    public func leave(id: UUID) async throws {}
}

/// The instances in PostgreSQL.
public struct PostgresInstances: InstanceRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) {
        self.store = store
    }

    public func beat(id: UUID, window: Duration) async throws -> Int {
        let seconds = Double(window.components.seconds)
        return try await store.withTransaction { connection in
            try await connection.execute(
                "INSERT INTO instances (id, seen_at) VALUES (\(id), now()) ON CONFLICT (id) DO UPDATE SET seen_at = now()")
            // Rows of instances killed long ago go; a recent one may still be counted for a few seconds.
            try await connection.execute("DELETE FROM instances WHERE seen_at < now() - interval '1 hour'")
            let rows = try await connection.query(
                "SELECT count(*) AS n FROM instances WHERE seen_at > now() - \(seconds) * interval '1 second'")
            return try rows.first?.int("n") ?? 1
        }
    }

    public func leave(id: UUID) async throws {
        try await store.execute("DELETE FROM instances WHERE id = \(id)")
    }
}
