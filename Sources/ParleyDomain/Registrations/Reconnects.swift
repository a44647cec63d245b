import AuthFlows
package import Foundation
package import Logging

/// `reconnect_required`: a registration whose authorization-code token's refresh was rejected
/// can only be renewed by a person. It gets that status and a fresh sign-in flow (its `flow`),
/// every instance hears of it (long-polls wake), and a completed flow makes it `active` again
/// (`FlowService.finish`). Built before the token broker that reports the rejections: it needs
/// only what starts flows (`FlowStarter`) and the caches below the conversations (`RegistrationNews`).
package struct Reconnects: Sendable {
    package let registrations: any RegistrationRepository
    package let starter: FlowStarter
    package let news: RegistrationNews
    package let logger: Logger

    /// The status, a fresh flow (a pending one is reused), the audit event, the news.
    package func refreshRejected(registration id: UUID, scopeKey: String) async {
        do {
            // The fresh flow first, so the event can name it.
            guard let record = try await registrations.find(id: id), record.status == .active else { return }
            let (flow, _) = try await starter.pendingFlow(
                kind: .oauth2, scopeKey: scopeKey, challengeURL: nil, purpose: .login, registration: record)
            guard try await registrations.changeStatus(
                from: .active, to: .reconnectRequired, id: id,
                event: LifecycleEvent(.reconnectRequired, detail: ["flowId": flow.idString, "reason": "refresh_rejected"]))
            else { return }
            await starter.audit.record(
                .registrationReconnectRequired, actor: .system, registrationID: id, destination: record.destination,
                detail: ["flow": flow.idString, "reason": "refresh_rejected"])
            logger.info("registration needs a person again", metadata: ["registration.id": .string(record.idString)])
            await news.changed(id)
        } catch {
            logger.warning(
                "a registration could not be marked reconnect_required",
                metadata: ["registration.id": .string(id.uuidString.lowercased()), "error": "\(error)"])
        }
    }

    package init(registrations: any RegistrationRepository, starter: FlowStarter, news: RegistrationNews, logger: Logger) {
        self.registrations = registrations
        self.starter = starter
        self.news = news
        self.logger = logger
    }
}
