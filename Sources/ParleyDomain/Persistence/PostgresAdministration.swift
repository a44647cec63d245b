public import AuthFlows
public import Foundation
public import ParleyCrypto
public import Store

/// The administration queries in PostgreSQL.
public struct PostgresAdministration: AdministrationRepository, RetentionRepository {
    package let store: PostgresStore
    package let keyRing: KeyRing

    public init(store: PostgresStore, keyRing: KeyRing) {
        self.store = store
        self.keyRing = keyRing
    }

    public func registrations(_ q: RegistrationQuery) async throws -> [(RegistrationRecord, RegistrationCursor)] {
        let afterMicros = q.after?.createdAtMicros
        let afterID = q.after?.id
        let rows = try await store.query(
            "SELECT " + PostgresRegistrations.columns
                + """
                , (extract(epoch FROM created_at) * 1000000)::bigint AS created_us FROM registrations
                WHERE (\(q.destination)::text IS NULL OR destination = \(q.destination))
                  AND (\(q.userHint)::text IS NULL OR user_hint = \(q.userHint))
                  AND (\(q.issuer)::text IS NULL OR user_issuer = \(q.issuer))
                  AND (\(q.subject)::text IS NULL OR user_subject = \(q.subject))
                  AND (\(q.client)::text IS NULL OR agent_client = \(q.client))
                  AND (\(afterMicros)::bigint IS NULL
                       OR (created_at, id) < (timestamptz 'epoch' + \(afterMicros)::bigint * interval '1 microsecond', \(afterID)::uuid))
                ORDER BY created_at DESC, id DESC LIMIT \(q.limit)
                """)
        return try rows.map { row in
            let record = try RegistrationRecord(row: row)
            return (record, RegistrationCursor(createdAtMicros: try row.int64("created_us"), id: record.id))
        }
    }

    public func tokenMetadata(registrationIDs: [UUID]) async throws -> [UUID: [TokenMetadata]] {
        guard !registrationIDs.isEmpty else { return [:] }
        // One query for a whole page: the ids travel as one text parameter.
        let ids = registrationIDs.map { $0.uuidString.lowercased() }.joined(separator: ",")
        let rows = try await store.query(
            """
            SELECT registration_id, kind, scope_key, expires_at, last_used_at FROM tokens
            WHERE registration_id = ANY (string_to_array(\(ids), ',')::uuid[]) ORDER BY scope_key
            """)
        var out: [UUID: [TokenMetadata]] = [:]
        for row in rows {
            guard let id = try row.optionalUUID("registration_id") else { continue }
            out[id, default: []].append(
                TokenMetadata(
                    registrationID: id, kind: try row.string("kind"), scopeKey: try row.string("scope_key"),
                    expiresAt: try row.optionalDate("expires_at"), lastUsedAt: try row.optionalDate("last_used_at")))
        }
        return out
    }

    package static func tokenCondition(_ f: RevocationFilter) -> SQL {
        """
        (\(f.registrationID)::uuid IS NULL OR registration_id = \(f.registrationID))
          AND (\(f.destination)::text IS NULL OR destination = \(f.destination))
          AND (\(f.scopeKey)::text IS NULL OR scope_key = \(f.scopeKey))
          AND (\(f.userHint)::text IS NULL OR registration_id IN (SELECT id FROM registrations WHERE user_hint = \(f.userHint)))
          AND (\(f.user?.issuer)::text IS NULL OR registration_id IN (
                SELECT id FROM registrations WHERE user_issuer = \(f.user?.issuer) AND user_subject = \(f.user?.subject)))
          AND (\(f.client)::text IS NULL OR registration_id IN (SELECT id FROM registrations WHERE agent_client = \(f.client)))
        """
    }

    /// The registrations a filter names (`RevocationFilter.namesRegistrations`), narrowed by its
    /// other members that describe a registration; nothing when it names none.
    package static func registrationCondition(_ f: RevocationFilter) -> SQL {
        """
        \(f.namesRegistrations)::boolean
          AND (\(f.client)::text IS NULL OR agent_client = \(f.client))
          AND (\(f.registrationID)::uuid IS NULL OR id = \(f.registrationID))
          AND (\(f.destination)::text IS NULL OR destination = \(f.destination))
          AND (\(f.userHint)::text IS NULL OR user_hint = \(f.userHint))
          AND (\(f.user?.issuer)::text IS NULL OR (user_issuer = \(f.user?.issuer) AND user_subject = \(f.user?.subject)))
        """
    }

    public func tokens(matching filter: RevocationFilter) async throws -> [(TokenKey, StoredToken)] {
        let rows = try await store.query(
            """
            SELECT destination, registration_id, scope_key, access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at
            FROM tokens WHERE
            """ + " " + Self.tokenCondition(filter))
        return try rows.map { row in
            let key = TokenKey(
                destination: try row.string("destination"), registrationID: try row.optionalUUID("registration_id").map { $0.uuidString.lowercased() },
                scopeKey: try row.string("scope_key"))
            return (key, try ConnectionTokens.decode(row, key: key, keyRing: keyRing))
        }
    }

    public func revoke(_ filter: RevocationFilter) async throws -> RevocationRemoval {
        guard !filter.isEmpty else { return RevocationRemoval(removed: 0, registrations: []) }
        return try await store.withTransaction { connection in
            var removed = try await connection.execute("DELETE FROM tokens WHERE " + Self.tokenCondition(filter))
            // Every instance drops its cached tokens when this commits.
            try await connection.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(token: nil)))")
            guard filter.namesRegistrations else { return RevocationRemoval(removed: removed, registrations: []) }
            let named = try await connection.query("SELECT id FROM registrations WHERE " + Self.registrationCondition(filter)).map { try $0.uuid("id") }
            let jars = try await connection.query(
                "DELETE FROM cookies WHERE registration_id IN (SELECT id FROM registrations WHERE " + Self.registrationCondition(filter)
                    + ") RETURNING registration_id")
            removed += Set(try jars.map { try $0.uuid("registration_id") }).count  // one per jar
            // The kept identity (a client's identity token, an agent's user) goes too: no grant
            // speaks for the user again until a token issued after this is shown. (`revoked` counts
            // token rows and jars, as the contract says; the kept identity is not one of them.)
            try await connection.execute(
                "UPDATE registrations SET identity_token_sealed = NULL WHERE identity_token_sealed IS NOT NULL AND "
                    + Self.registrationCondition(filter))
            // Each named registration's event, in the same transaction as the removal (the outbox).
            try await connection.execute(
                PostgresEvents.inserting(
                    LifecycleEvent(.revoked, detail: ["by": "admin", "reason": "revocation"]),
                    columns: "id, destination, user_issuer, user_subject, user_verified",
                    from: "registrations WHERE " + Self.registrationCondition(filter)))
            // … and every cached jar, manager and token of the named registrations.
            for id in named {
                try await connection.execute(
                    "SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(registrationID: id)))")
            }
            return RevocationRemoval(removed: removed, registrations: named)
        }
    }

    public func purge(flowsBefore: Date, cookiesBefore: Date, auditBefore: Date) async throws -> (flows: Int, cookies: Int, audit: Int) {
        let flows = try await store.execute("DELETE FROM flows WHERE expires_at < \(flowsBefore)")
        let cookies = try await store.execute("DELETE FROM cookies WHERE expires_at IS NOT NULL AND expires_at < \(cookiesBefore)")
        let audit = try await store.execute("DELETE FROM audit_events WHERE at < \(auditBefore)")
        // Events as long as the audit log, unless a delivery of theirs is still being tried.
        let events = try await store.execute(
            """
            DELETE FROM events e WHERE e.at < \(auditBefore)
              AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_id = e.id AND d.status = 'pending')
            """)
        return (flows, cookies, audit + events)
    }

    public func audit(since: Date?, before: Int64?, limit: Int) async throws -> [StoredAuditEvent] {
        let rows = try await store.query(
            """
            SELECT id, at, actor, action, registration_id, destination, detail::text AS detail FROM audit_events
            WHERE (\(since)::timestamptz IS NULL OR at >= \(since)) AND (\(before)::bigint IS NULL OR id < \(before))
            ORDER BY id DESC LIMIT \(limit)
            """)
        return try rows.map { row in
            let detail = (try? JSONSerialization.jsonObject(with: Data(try row.string("detail").utf8))) as? [String: String] ?? [:]
            return StoredAuditEvent(
                id: try row.int64("id"), at: try row.date("at"),
                event: AuditEvent(
                    action: try row.string("action"), actor: AuditActor(rawValue: try row.string("actor")) ?? .system,
                    registrationID: try row.optionalUUID("registration_id"), destination: try row.optionalString("destination"),
                    detail: detail))
        }
    }
}
