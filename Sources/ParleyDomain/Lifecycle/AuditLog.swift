package import AuthFlows
package import Foundation
package import Logging

/// Every action Parley writes to the audit log. The raw values are what is stored and
/// what `GET /admin/v1/audit` shows; never change one (stored events keep the old text).
package enum AuditAction: String, Sendable, CaseIterable {
    case registrationCreated = "registration.created"
    case registrationRefused = "registration.refused"
    case registrationApproved = "registration.approved"
    /// A `login_required` registration registered upstream after its login flow.
    case registrationActivated = "registration.activated"
    /// The login flow completed but the upstream asked for another login.
    case registrationSMPPending = "registration.smp_pending"
    /// The upstream registration after the login flow failed.
    case registrationSMPFailed = "registration.smp_failed"
    case registrationUpstreamDeleteFailed = "registration.upstream_delete_failed"
    case registrationDeleted = "registration.deleted"
    /// A rejected refresh token: only a person can renew the registration's credentials now.
    case registrationReconnectRequired = "registration.reconnect_required"
    /// A flow completed for a `reconnect_required` registration: it is `active` again.
    case registrationRecovered = "registration.recovered"

    case flowCreated = "flow.created"
    case flowCompleted = "flow.completed"
    case flowFailed = "flow.failed"
    case flowExpired = "flow.expired"
    /// A flow signed in as somebody other than its registration's user (the issuers only).
    case flowIdentityMismatch = "flow.identity_mismatch"
    /// A registration without a user got one: the first sign-in a flow completed.
    case registrationUserBound = "registration.user_bound"
    /// `PUT /v1/registrations/me/identity`: a fresh identity token of the same user is kept.
    case identityRenewed = "registration.identity_renewed"
    /// `PUT /v1/registrations/me/identity` with another user's token (`detail.issuer`; never the token).
    case identityRenewalRefused = "registration.identity_renewal_refused"

    case tokenIssued = "token.issued"
    case tokenRefreshed = "token.refreshed"
    case tokenRefreshRejected = "token.refresh_rejected"
    case tokenRefreshFailed = "token.refresh_failed"
    /// Revoked at the upstream's RFC 7009 endpoint when its registration was deleted.
    case tokenRevoked = "token.revoked"

    case adminRegistrationsListed = "admin.registrations.listed"
    case adminRegistrationRead = "admin.registration.read"
    case adminRevocation = "admin.revocation"
    /// An identity provider ended a user's sessions (OpenID Connect Back-Channel Logout).
    case backChannelLogout = "user.logged_out"
    case adminAuditRead = "admin.audit.read"
    case adminEventsRead = "admin.events.read"
    /// An administrator asked for an event to be sent again (`detail.event`).
    case adminEventRedelivery = "admin.event.redelivery"
    /// A presented admin token matched none (`detail.client`: the client address; never the token).
    case adminAuthenticationFailed = "admin.authentication_failed"

    /// The action for a flow that ended with `status`; nil for `pending`, which is no end.
    package init?(flowFinished status: FlowStatus) {
        switch status {
        case .pending: return nil
        case .completed: self = .flowCompleted
        case .failed: self = .flowFailed
        case .expired: self = .flowExpired
        }
    }

    /// The action for a token event of the OAuth2 broker.
    package init(_ event: TokenEvent) {
        switch event {
        case .issued: self = .tokenIssued
        case .refreshed: self = .tokenRefreshed
        case .refreshRejected: self = .tokenRefreshRejected
        case .refreshFailed: self = .tokenRefreshFailed
        }
    }
}

/// Records audit events. A failure to record is logged, never turned into a failed request.
package struct AuditLog: Sendable {
    package let repository: any AuditRepository
    package let logger: Logger

    package func record(
        _ action: AuditAction, actor: AuditActor, registrationID: UUID? = nil, destination: String? = nil, detail: [String: String] = [:]
    ) async {
        do {
            try await repository.append(
                AuditEvent(action: action.rawValue, actor: actor, registrationID: registrationID, destination: destination, detail: detail))
        } catch {
            logger.warning("audit event not recorded", metadata: ["audit.action": .string(action.rawValue), "error": "\(error)"])
        }
    }

    package init(repository: any AuditRepository, logger: Logger) {
        self.repository = repository
        self.logger = logger
    }
}
