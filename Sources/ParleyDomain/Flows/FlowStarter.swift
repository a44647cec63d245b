import AuthFlows
package import Conversation
package import Foundation
import ParleyCrypto
import Tracing

/// The start of every flow: creation with an unguessable URL, the contract's flow object, and
/// a registration's pending flow found again. It finishes nothing, so what starts flows (a
/// challenge, a rejected refresh: `Reconnects`) needs none of the rooms a completion reaches,
/// and is built before them.
package struct FlowStarter: Sendable {
    package static let lifetime: TimeInterval = 600
    /// A pending login flow must have this much left to be handed out again.
    package static let reuseMargin: TimeInterval = 60

    package let flows: any FlowRepository
    package let secrets: Secrets
    package let audit: AuditLog
    package let clock: any WallClock
    package let publicURL: String

    /// Creates a pending flow and returns it with its URL (the only time the caller sees the secret).
    package func create(
        for registration: RegistrationRecord, kind: FlowKind, purpose: FlowPurpose = .login, scopeKey: String?,
        challengeURL: String? = nil
    ) async throws -> (FlowRecord, String) {
        let span = startSpan("flow create")
        defer { span.end() }
        if span.isRecording { span.updateAttributes { $0["parley.flow.kind"] = kind.rawValue; $0["parley.flow.purpose"] = purpose.rawValue } }
        let id = UUID()
        let secret = SecureRandom.token(byteCount: 32)
        let now = clock.now
        let flow = FlowRecord(
            id: id, registrationID: registration.id, kind: kind, purpose: purpose, secretHash: SHA256.hash(Array(secret.utf8)),
            secretSealed: secrets.seal(flowSecret: secret, flowID: id.uuidString.lowercased()), scopeKey: scopeKey,
            returnUrl: registration.returnUrl, challengeURL: challengeURL, expiresAt: now.addingTimeInterval(Self.lifetime), createdAt: now)
        try await flows.insert(flow)
        await audit.record(
            .flowCreated, actor: .system, registrationID: registration.id, destination: registration.destination,
            detail: ["kind": kind.rawValue, "flow": flow.idString, "purpose": purpose.rawValue])
        return (flow, url(flow, secret: secret))
    }

    package func url(_ flow: FlowRecord, secret: String) -> String {
        publicURL + "/flows/" + flow.idString + "?k=" + secret
    }

    /// The flow's URL for its owner (the secret is kept sealed for this).
    package func url(_ flow: FlowRecord) -> String? {
        secrets.flowSecret(of: flow).map { url(flow, secret: $0) }
    }

    /// Where every flow page ends.
    package func doneURL(_ flow: FlowRecord) -> String { publicURL + "/flows/\(flow.idString)/done" }

    /// The contract's flow object (`url` with the secret only for the flow's owner).
    package func view(_ flow: FlowRecord, url: String? = nil) -> FlowView {
        FlowView(
            id: flow.idString, kind: flow.kind.rawValue, status: flow.status.rawValue, url: url ?? self.url(flow), expiresAt: flow.expiresAt,
            error: flow.status == .failed ? flow.error ?? "failed" : nil)
    }

    /// The registration's pending flow of this kind, scope key and purpose with at least
    /// `reuseMargin` left, else a new one.
    package func pendingFlow(
        kind: FlowKind, scopeKey: String?, challengeURL: String?, purpose: FlowPurpose, registration: RegistrationRecord
    ) async throws -> (flow: FlowRecord, url: String) {
        let flow: FlowRecord
        let url: String
        if let pending = try await flows.latest(registrationID: registration.id, purpose: purpose), pending.status == .pending,
            pending.kind == kind, pending.scopeKey == scopeKey,
            pending.expiresAt > clock.now.addingTimeInterval(Self.reuseMargin), let link = self.url(pending)
        {
            (flow, url) = (pending, link)
        } else {
            (flow, url) = try await create(for: registration, kind: kind, purpose: purpose, scopeKey: scopeKey, challengeURL: challengeURL)
        }
        return (flow, url)
    }

    package init(flows: any FlowRepository, secrets: Secrets, audit: AuditLog, clock: any WallClock, publicURL: String) {
        self.flows = flows
        self.secrets = secrets
        self.audit = audit
        self.clock = clock
        self.publicURL = publicURL
    }
}
