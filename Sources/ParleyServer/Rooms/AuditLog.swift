import Foundation
import Logging

/// Records audit events. A failure to record is logged, never turned into a failed request.
struct AuditLog: Sendable {
    let repository: any AuditRepository
    let logger: Logger

    func record(
        _ action: String, actor: AuditActor, registrationID: UUID? = nil, destination: String? = nil, detail: [String: String] = [:]
    ) async {
        do {
            try await repository.append(
                AuditEvent(action: action, actor: actor, registrationID: registrationID, destination: destination, detail: detail))
        } catch {
            logger.warning("audit event not recorded", metadata: ["audit.action": .string(action), "error": "\(error)"])
        }
    }
}
