public import Foundation
public import Store

/// Lifecycle events and their webhook deliveries in PostgreSQL (migration 0013): the outbox.
/// An event is written by the very statement that makes the change it reports (`writing`), so
/// there is never one without the other. Deliveries are leased while an instance sends them.
public struct PostgresEvents: EventRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) { self.store = store }

    /// What a change statement's `RETURNING` gives the event: the registration row itself, or a
    /// flow row whose registration is looked up.
    package enum Source {
        case registration
        case flow
    }

    /// `INSERT INTO events … SELECT` one event per row of `rows`, whose `columns` give, in this order,
    /// the registration id, destination, user issuer, subject and verified flag. The one place an
    /// event row is written.
    package static func inserting(_ event: LifecycleEvent, columns: SQL, from rows: SQL) -> SQL {
        """
        INSERT INTO events (id, type, registration_id, destination, user_issuer, user_subject, user_verified, detail)
        SELECT gen_random_uuid(), \(event.type.rawValue), \(columns), \(detailJSON(event.detail))::jsonb FROM \(rows)
        """
    }

    /// `change` (an `UPDATE` or `DELETE` of one row) and the event about it, in one statement: the
    /// event is inserted only for a row the change touched. The statement's count is the events'.
    package static func writing(_ event: LifecycleEvent, with change: SQL, returning source: Source) -> SQL {
        switch source {
        case .registration:
            return "WITH changed AS (" + change + " RETURNING id, destination, user_issuer, user_subject, user_verified) "
                + inserting(event, columns: "c.id, c.destination, c.user_issuer, c.user_subject, c.user_verified", from: "changed c")
        case .flow:
            return "WITH changed AS (" + change + " RETURNING registration_id) "
                + inserting(
                    event, columns: "c.registration_id, r.destination, r.user_issuer, r.user_subject, r.user_verified",
                    from: "changed c LEFT JOIN registrations r ON r.id = c.registration_id")
        }
    }

    package static func detailJSON(_ detail: [String: String]) -> String {
        String(decoding: JSONValue.object(detail.mapValues { .string($0) }).encoded(), as: UTF8.self)
    }

    public func append(_ event: LifecycleEvent, registrationID: UUID?, destination: String?) async throws {
        try await store.execute(
            Self.inserting(
                event, columns: "\(registrationID)::uuid, \(destination), r.user_issuer, r.user_subject, r.user_verified",
                from: "(SELECT 1) one LEFT JOIN registrations r ON r.id = \(registrationID)::uuid"))
    }

    public func fanOut(limit: Int, endpoints: @Sendable (String, String?) -> [String]) async throws -> Int {
        try await store.withTransaction { connection in
            // SKIP LOCKED: two instances fanning out at once take different events.
            let rows = try await connection.query(
                "SELECT id, type, destination FROM events WHERE NOT fanned_out ORDER BY seq LIMIT \(limit) FOR UPDATE SKIP LOCKED")
            guard !rows.isEmpty else { return 0 }
            var ids: [String] = []
            for row in rows {
                let id = try row.uuid("id")
                ids.append(id.uuidString.lowercased())
                for endpoint in endpoints(try row.string("type"), try row.optionalString("destination")) {
                    try await connection.execute(
                        "INSERT INTO event_deliveries (event_id, endpoint) VALUES (\(id), \(endpoint)) ON CONFLICT DO NOTHING")
                }
            }
            try await connection.execute(
                "UPDATE events SET fanned_out = true WHERE id = ANY (string_to_array(\(ids.joined(separator: ",")), ',')::uuid[])")
            return rows.count
        }
    }

    package static let eventColumns = "e.id, e.seq, e.type, e.at, e.registration_id, e.destination, e.user_issuer, e.user_subject, e.user_verified, e.detail::text AS detail"

    package static func event(_ row: Row) throws -> StoredLifecycleEvent {
        let detail = (try? JSONSerialization.jsonObject(with: Data(try row.string("detail").utf8))) as? [String: String] ?? [:]
        var user: EventUser?
        if let issuer = try row.optionalString("user_issuer"), let subject = try row.optionalString("user_subject") {
            user = EventUser(issuer: issuer, subject: subject, verified: try row.optionalBool("user_verified") ?? false)
        }
        return StoredLifecycleEvent(
            id: try row.uuid("id"), seq: try row.int64("seq"), type: try row.string("type"), at: try row.date("at"),
            registrationID: try row.optionalUUID("registration_id"), destination: try row.optionalString("destination"), user: user,
            detail: detail)
    }

    public func claimDue(limit: Int, lease: Duration) async throws -> [DueDelivery] {
        let rows = try await store.query(
            """
            UPDATE event_deliveries d SET locked_until = now() + \(lease.timeInterval) * interval '1 second'
            FROM (SELECT event_id, endpoint FROM event_deliveries
                  WHERE status = 'pending' AND next_attempt_at <= now() AND (locked_until IS NULL OR locked_until < now())
                  ORDER BY next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED) due, events e
            WHERE d.event_id = due.event_id AND d.endpoint = due.endpoint AND e.id = d.event_id
            RETURNING d.endpoint, d.attempts,
            """ + " " + SQL(unsafeSQL: Self.eventColumns))
        return try rows.map { row in
            DueDelivery(event: try Self.event(row), endpoint: try row.string("endpoint"), attempts: try row.int("attempts"))
        }
    }

    public func recordAttempt(
        eventID: UUID, endpoint: String, delivered: Bool, status: Int?, error: String?, retryAt: Date?
    ) async throws {
        let outcome = delivered ? "delivered" : retryAt == nil ? "failed" : "pending"
        try await store.execute(
            """
            UPDATE event_deliveries SET attempts = attempts + 1, last_attempt_at = now(), last_status = \(status), last_error = \(error),
                locked_until = NULL, status = \(outcome), delivered_at = CASE WHEN \(delivered) THEN now() ELSE delivered_at END,
                next_attempt_at = COALESCE(\(retryAt)::timestamptz, next_attempt_at),
                attempt_log = jsonb_path_query_array(
                    attempt_log || jsonb_build_array(jsonb_build_object(
                        'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'status', \(status)::int, 'error', \(error)::text)),
                    '$[last - 19 to last]')
            WHERE event_id = \(eventID) AND endpoint = \(endpoint)
            """)
    }

    public func list(type: String?, registrationID: UUID?, before: Int64?, limit: Int) async throws -> [StoredLifecycleEvent] {
        let rows = try await store.query(
            "SELECT " + SQL(unsafeSQL: Self.eventColumns)
                + """
                 FROM events e
                WHERE (\(type)::text IS NULL OR e.type = \(type)) AND (\(registrationID)::uuid IS NULL OR e.registration_id = \(registrationID))
                  AND (\(before)::bigint IS NULL OR e.seq < \(before))
                ORDER BY e.seq DESC LIMIT \(limit)
                """)
        var events = try rows.map(Self.event)
        guard !events.isEmpty else { return [] }
        let ids = events.map { $0.id.uuidString.lowercased() }.joined(separator: ",")
        let deliveries = try await store.query(
            """
            SELECT event_id, endpoint, status, attempts, next_attempt_at, last_attempt_at, last_status, last_error, delivered_at,
                attempt_log::text AS attempt_log
            FROM event_deliveries WHERE event_id = ANY (string_to_array(\(ids), ',')::uuid[]) ORDER BY endpoint
            """)
        var byEvent: [UUID: [WebhookDeliveryState]] = [:]
        for row in deliveries {
            let status = WebhookDeliveryState.Status(rawValue: try row.string("status")) ?? .pending
            byEvent[try row.uuid("event_id"), default: []].append(
                WebhookDeliveryState(
                    endpoint: try row.string("endpoint"), status: status, attempts: try row.int("attempts"),
                    nextAttemptAt: status == .pending ? try row.optionalDate("next_attempt_at") : nil,
                    lastAttemptAt: try row.optionalDate("last_attempt_at"), lastStatus: try row.optionalInt("last_status"),
                    lastError: try row.optionalString("last_error"), deliveredAt: try row.optionalDate("delivered_at"),
                    history: Self.attempts(try row.string("attempt_log"))))
        }
        for index in events.indices { events[index].deliveries = byEvent[events[index].id] ?? [] }
        return events
    }

    /// The attempt log as stored: `[{"at", "status", "error"}]`; what does not read is left out.
    package static func attempts(_ text: String) -> [WebhookAttempt] {
        guard let entries = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [[String: Any]] else { return [] }
        return entries.compactMap { entry in
            guard let at = (entry["at"] as? String).flatMap({ try? Date($0, strategy: .iso8601) }) else { return nil }
            return WebhookAttempt(at: at, status: (entry["status"] as? NSNumber)?.intValue, error: entry["error"] as? String)
        }
    }

    public func redeliver(id: UUID) async throws -> Bool {
        try await store.withTransaction { connection in
            // Fanned out again: an endpoint that covers the event now and did not then gets it too.
            guard try await connection.execute("UPDATE events SET fanned_out = false WHERE id = \(id)") > 0 else { return false }
            // The lease stays: an attempt in flight now is not joined by a second one.
            try await connection.execute(
                "UPDATE event_deliveries SET status = 'pending', next_attempt_at = now() WHERE event_id = \(id)")
            return true
        }
    }

    public func pendingDeliveries() async throws -> Int {
        try await store.query("SELECT count(*)::bigint AS n FROM event_deliveries WHERE status = 'pending'").first?.int("n") ?? 0
    }
}
