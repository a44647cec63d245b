import Foundation
import ParleyCrypto
import Store

/// A flow row. The URL secret and the OAuth2 state exist only as hashes.
struct FlowRecord: Sendable {
    var id: UUID
    var registrationID: UUID
    var kind: String
    var purpose: String
    var secretHash: [UInt8]
    var secretSealed: [UInt8]?
    var pkceVerifierSealed: [UInt8]?
    var scopeKey: String?
    var status: String
    var error: String?
    var returnUrl: String?
    var expiresAt: Date
    var createdAt: Date

    var idString: String { id.uuidString.lowercased() }

    init(row: Row) throws {
        id = try row.uuid("id")
        registrationID = try row.uuid("registration_id")
        kind = try row.string("kind")
        purpose = try row.string("purpose")
        secretHash = try row.bytes("secret_hash")
        secretSealed = try row.optionalBytes("secret_sealed")
        pkceVerifierSealed = try row.optionalBytes("pkce_verifier_sealed")
        scopeKey = try row.optionalString("scope_key")
        status = try row.string("status")
        error = try row.optionalString("error")
        returnUrl = try row.optionalString("return_url")
        expiresAt = try row.date("expires_at")
        createdAt = try row.date("created_at")
    }
}

struct FlowRepository: Sendable {
    let store: PostgresStore
    static let columns: SQL =
        "id, registration_id, kind, purpose, secret_hash, secret_sealed, pkce_verifier_sealed, scope_key, status, error, return_url, expires_at, created_at"

    func insert(
        id: UUID, registrationID: UUID, kind: String, purpose: String, secretHash: [UInt8], secretSealed: [UInt8],
        scopeKey: String?, returnUrl: String?, expiresAt: Date, now: Date
    ) async throws -> FlowRecord {
        let rows = try await store.query(
            """
            INSERT INTO flows (id, registration_id, kind, purpose, secret_hash, secret_sealed, scope_key, status,
                return_url, expires_at, created_at)
            VALUES (\(id), \(registrationID), \(kind), \(purpose), \(secretHash), \(secretSealed), \(scopeKey),
                'pending', \(returnUrl), \(expiresAt), \(now))
            RETURNING
            """ + " " + Self.columns)
        return try FlowRecord(row: rows[0])
    }

    /// A browser opened the start page: a new `state` (hashed) and PKCE verifier (sealed).
    func begin(id: UUID, stateHash: [UInt8], pkceVerifierSealed: [UInt8]) async throws -> Bool {
        try await store.execute(
            """
            UPDATE flows SET state_hash = \(stateHash), pkce_verifier_sealed = \(pkceVerifierSealed)
            WHERE id = \(id) AND status = 'pending'
            """) > 0
    }

    /// Claims the pending flow a callback's `state` names, exactly once: the state is
    /// cleared in the same statement, so a replayed or raced callback finds nothing.
    func claim(stateHash: [UInt8]) async throws -> FlowRecord? {
        try await store.query(
            """
            UPDATE flows f SET state_hash = NULL FROM (SELECT id, pkce_verifier_sealed FROM flows WHERE state_hash = \(stateHash)
                AND status = 'pending' FOR UPDATE) old
            WHERE f.id = old.id RETURNING f.id, f.registration_id, f.kind, f.purpose, f.secret_hash, f.secret_sealed,
                old.pkce_verifier_sealed, f.scope_key, f.status, f.error, f.return_url, f.expires_at, f.created_at
            """
        ).first.map(FlowRecord.init(row:))
    }

    func latest(registrationID: UUID, purpose: String) async throws -> FlowRecord? {
        try await store.query(
            "SELECT " + Self.columns + " FROM flows WHERE registration_id = \(registrationID) AND purpose = \(purpose) ORDER BY created_at DESC LIMIT 1"
        ).first.map(FlowRecord.init(row:))
    }

    func find(id: UUID) async throws -> FlowRecord? {
        try await store.query("SELECT " + Self.columns + " FROM flows WHERE id = \(id)").first.map(FlowRecord.init(row:))
    }

    /// Moves a pending flow to a final status; false when it was no longer pending
    /// (a replayed callback, a concurrent completion), so each flow finishes once.
    func finish(id: UUID, status: String, error: String?, now: Date) async throws -> Bool {
        let changed = try await store.execute(
            """
            UPDATE flows SET status = \(status), error = \(error), completed_at = \(now), state_hash = NULL, pkce_verifier_sealed = NULL
            WHERE id = \(id) AND status = 'pending'
            """)
        if changed > 0 { try await store.notify(channel: FlowNotifications.channel, payload: id.uuidString.lowercased()) }
        return changed > 0
    }
}
