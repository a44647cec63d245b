public import Foundation
public import Store

extension FlowRecord {
    init(row: Row) throws {
        self.init(
            id: try row.uuid("id"), registrationID: try row.uuid("registration_id"), kind: try row.enumValue("kind", FlowKind.self),
            purpose: try row.enumValue("purpose", FlowPurpose.self), secretHash: try row.bytes("secret_hash"),
            secretSealed: try row.optionalBytes("secret_sealed"), pkceVerifierSealed: try row.optionalBytes("pkce_verifier_sealed"),
            scopeKey: try row.optionalString("scope_key"), status: try row.enumValue("status", FlowStatus.self),
            error: try row.optionalString("error"), returnUrl: try row.optionalString("return_url"),
            challengeURL: try row.optionalString("challenge_url"), failedAttempts: try row.int("failed_attempts"),
            secondFactor: try row.bool("second_factor"), expiresAt: try row.date("expires_at"), createdAt: try row.date("created_at"))
    }
}

/// Flow rows in PostgreSQL.
public struct PostgresFlows: FlowRepository {
    let store: PostgresStore

    public init(store: PostgresStore) { self.store = store }

    static let columns: SQL =
        """
        id, registration_id, kind, purpose, secret_hash, secret_sealed, pkce_verifier_sealed, scope_key, status, error, return_url,
        challenge_url, failed_attempts, second_factor, expires_at, created_at
        """

    public func insert(_ f: FlowRecord) async throws {
        try await store.execute(
            """
            INSERT INTO flows (id, registration_id, kind, purpose, secret_hash, secret_sealed, scope_key, status,
                return_url, challenge_url, expires_at, created_at)
            VALUES (\(f.id), \(f.registrationID), \(f.kind.rawValue), \(f.purpose.rawValue), \(f.secretHash), \(f.secretSealed),
                \(f.scopeKey), \(f.status.rawValue), \(f.returnUrl), \(f.challengeURL), \(f.expiresAt), \(f.createdAt))
            """)
    }

    public func begin(id: UUID, stateHash: [UInt8], pkceVerifierSealed: [UInt8]) async throws -> Bool {
        try await store.execute(
            """
            UPDATE flows SET state_hash = \(stateHash), pkce_verifier_sealed = \(pkceVerifierSealed)
            WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue)
            """) > 0
    }

    /// The state is cleared in the same statement, so a replayed or raced callback finds nothing.
    public func claim(stateHash: [UInt8]) async throws -> FlowRecord? {
        try await store.query(
            """
            UPDATE flows f SET state_hash = NULL FROM (SELECT id, pkce_verifier_sealed FROM flows WHERE state_hash = \(stateHash)
                AND status = \(FlowStatus.pending.rawValue) FOR UPDATE) old
            WHERE f.id = old.id RETURNING f.id, f.registration_id, f.kind, f.purpose, f.secret_hash, f.secret_sealed,
                old.pkce_verifier_sealed, f.scope_key, f.status, f.error, f.return_url, f.challenge_url, f.failed_attempts,
                f.second_factor, f.expires_at, f.created_at
            """
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

    public func finish(id: UUID, status: FlowStatus, error: String?, at now: Date) async throws -> Bool {
        try await store.execute(
            """
            UPDATE flows SET status = \(status.rawValue), error = \(error), completed_at = \(now), state_hash = NULL, pkce_verifier_sealed = NULL
            WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue)
            """) > 0
    }

    public func recordFailedAttempt(id: UUID) async throws -> Int {
        let rows = try await store.query(
            "UPDATE flows SET failed_attempts = failed_attempts + 1 WHERE id = \(id) RETURNING failed_attempts")
        return try rows.first?.int("failed_attempts") ?? 0
    }

    public func requireSecondFactor(id: UUID, otpForm: String) async throws {
        try await store.execute(
            """
            UPDATE flows SET second_factor = true, challenge_url = \(otpForm) WHERE id = \(id) AND status = \(FlowStatus.pending.rawValue)
            """)
    }
}
