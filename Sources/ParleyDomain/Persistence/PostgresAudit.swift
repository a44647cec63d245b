import Foundation
public import Store

/// Audit events in PostgreSQL (append-only).
public struct PostgresAudit: AuditRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) { self.store = store }

    public func append(_ event: AuditEvent) async throws {
        let json = String(decoding: JSONValue.object(event.detail.mapValues { .string($0) }).encoded(), as: UTF8.self)
        try await store.execute(
            """
            INSERT INTO audit_events (actor, action, registration_id, destination, detail)
            VALUES (\(event.actor.rawValue), \(event.action), \(event.registrationID), \(event.destination), \(json)::jsonb)
            """)
    }
}

/// Ready when the database answers and every embedded migration is applied.
public struct PostgresReadiness: ReadinessProbe {
    package let store: PostgresStore
    package let migrations: MigrationSource

    public init(store: PostgresStore, migrations: MigrationSource) {
        self.store = store
        self.migrations = migrations
    }

    public func isReady() async -> Bool {
        await store.isReady(migrations: migrations)
    }
}
