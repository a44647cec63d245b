public import Foundation
public import Store

extension FlowRecord {
    package init(row: Row) throws {
        self.init(
            id: try row.uuid("id"), registrationID: try row.uuid("registration_id"), kind: FlowKind(rawValue: try row.string("kind")),
            purpose: try row.enumValue("purpose", FlowPurpose.self), secretHash: try row.bytes("secret_hash"),
            secretSealed: try row.optionalBytes("secret_sealed"), scopeKey: try row.optionalString("scope_key"),
            status: try row.enumValue("status", FlowStatus.self), error: try row.optionalString("error"),
            returnUrl: try row.optionalString("return_url"), challengeURL: try row.optionalString("challenge_url"),
            kindState: try row.optionalBytes("kind_state_sealed"), stagedCookies: try row.optionalBytes("staged_cookies_sealed"), expiresAt: try row.date("expires_at"), createdAt: try row.date("created_at"))
    }
}

/// Flow rows in PostgreSQL.
public struct PostgresFlows: FlowRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) { self.store = store }

    package static let columns: SQL =
        """
        id, registration_id, kind, purpose, secret_hash, secret_sealed, scope_key, status, error, return_url, challenge_url, kind_state_sealed,
        staged_cookies_sealed, expires_at, created_at
        """

    public func insert(_ f: FlowRecord) async throws {
        try await store.execute(
            """
            INSERT INTO flows (id, registration_id, kind, purpose, secret_hash, secret_sealed, scope_key, status,
                return_url, challenge_url, kind_state_sealed, expires_at, created_at)
            VALUES (\(f.id), \(f.registrationID), \(f.kind.rawValue), \(f.purpose.rawValue), \(f.secretHash), \(f.secretSealed),
                \(f.scopeKey), \(f.status.rawValue), \(f.returnUrl), \(f.challengeURL), \(f.kindState), \(f.expiresAt), \(f.createdAt))
            """)
    }

    public func replaceKindState(id: UUID, expected: [UInt8]?, with state: [UInt8]?, callbackHash: [UInt8]?) async throws -> Bool {
        try await store.execute(
            """
            UPDATE flows SET kind_state_sealed = \(state), state_hash = \(callbackHash)
            WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue) AND kind_state_sealed IS NOT DISTINCT FROM \(expected)
            """) > 0
    }

    public func replaceStagedCookies(id: UUID, expected: [UInt8]?, with cookies: [UInt8]?) async throws -> Bool {
        try await store.execute(
            """
            UPDATE flows SET staged_cookies_sealed = \(cookies)
            WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue) AND staged_cookies_sealed IS NOT DISTINCT FROM \(expected)
            """) > 0
    }

    /// The hash is cleared in the same statement, so a replayed or raced callback finds nothing.
    public func claim(callbackHash: [UInt8]) async throws -> FlowRecord? {
        try await store.query(
            "UPDATE flows SET state_hash = NULL WHERE state_hash = \(callbackHash) AND status = \(FlowStatus.pending.rawValue) RETURNING "
                + Self.columns
        ).first.map(FlowRecord.init(row:))
    }

    public func latest(registrationID: UUID, purpose: FlowPurpose) async throws -> FlowRecord? {
        try await store.query(
            "SELECT " + Self.columns
                + " FROM flows WHERE registration_id = \(registrationID) AND purpose = \(purpose.rawValue) ORDER BY created_at DESC LIMIT 1"
        ).first.map(FlowRecord.init(row:))
    }

    public func find(id: UUID) async throws -> FlowRecord? {
        try await store.query("SELECT " + Self.columns + " FROM flows WHERE id = \(id)").first.map(FlowRecord.init(row:))
    }

    /// A finished flow keeps no kind state: whatever secret a kind held goes with the end.
    public func finish(id: UUID, status: FlowStatus, error: String?, at now: Date, event: LifecycleEvent?) async throws -> Bool {
        let update: SQL = """
            UPDATE flows SET status = \(status.rawValue), error = \(error), completed_at = \(now), state_hash = NULL, kind_state_sealed = NULL, staged_cookies_sealed = NULL,
                pkce_verifier_sealed = NULL
            WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue)
            """
        guard let event else { return try await store.execute(update) > 0 }
        return try await store.execute(PostgresEvents.writing(event, with: update, returning: .flow)) > 0
    }
}
