public import Foundation
public import Store

/// Not-befores and logout tokens in PostgreSQL; a new not-before is announced on the cache
/// channel in the same transaction, so every instance reloads its copy when it commits.
public struct PostgresNotBefores: NotBeforeRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) {
        self.store = store
    }

    public func all() async throws -> [NotBeforeKey: Date] {
        var out: [NotBeforeKey: Date] = [:]
        for row in try await store.query("SELECT issuer, subject, client, not_before FROM identity_not_before") {
            let key = NotBeforeKey(issuer: try row.string("issuer"), subject: try row.string("subject"), client: try row.string("client"))
            out[key] = try row.date("not_before")
        }
        return out
    }

    public func set(_ key: NotBeforeKey, at: Date) async throws {
        try await store.withTransaction { connection in
            try await connection.execute(
                """
                INSERT INTO identity_not_before (issuer, subject, client, not_before) VALUES (\(key.issuer), \(key.subject), \(key.client), \(at))
                ON CONFLICT (issuer, subject, client) DO UPDATE SET not_before = GREATEST(identity_not_before.not_before, EXCLUDED.not_before)
                """)
            try await connection.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.notBeforePayload))")
        }
    }

    public func takeLogoutToken(issuer: String, jti: String, expiresAt: Date) async throws -> Bool {
        // Expired entries go first: a token past its `exp` is refused before it gets here.
        try await store.execute("DELETE FROM logout_tokens_seen WHERE expires_at < now() - interval '1 day'")
        return try await store.execute(
            """
            INSERT INTO logout_tokens_seen (issuer, jti, expires_at) VALUES (\(issuer), \(jti), \(expiresAt))
            ON CONFLICT (issuer, jti) DO NOTHING
            """) == 1
    }
}
