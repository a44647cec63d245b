import Foundation
import Logging
import Store

/// Audit events: who did what, when; never a secret.
struct AuditLog: Sendable {
    enum Actor: String, Sendable { case client, admin, system }

    let store: PostgresStore
    let logger: Logger

    /// Records an event. A failure to record is logged, never turned into a failed request.
    func record(
        _ action: String, actor: Actor, registrationID: UUID? = nil, destination: String? = nil, detail: [String: String] = [:]
    ) async {
        let json = String(decoding: JSONValue.object(detail.mapValues { .string($0) }).encoded(), as: UTF8.self)
        do {
            try await store.execute(
                """
                INSERT INTO audit_events (actor, action, registration_id, destination, detail)
                VALUES (\(actor.rawValue), \(action), \(registrationID), \(destination), \(json)::jsonb)
                """)
        } catch {
            logger.warning("audit event not recorded", metadata: ["audit.action": .string(action), "error": "\(error)"])
        }
    }
}
