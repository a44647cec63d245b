package import AuthFlows
package import Foundation
package import Logging

/// Who a flow's sign-in was, as whoever vouched for it says: the authorization server's
/// `id_token` (or userinfo) `sub`, the SAML assertion's `NameID` under its `Issuer`, the
/// username the upstream accepted for Basic. An OTP step yields none (the first factor's stands).
package struct SignedInIdentity: Sendable, Equatable, Codable {
    /// Who vouched: the AS's or IdP's issuer; for Basic, the destination's URL.
    package let issuer: String
    package let subject: String
}

/// The binding of flows to the registration's user. A registration's user is set once: by a
/// verified identity token, else by the first sign-in a flow completes. Every later sign-in
/// must be that user (`sameUser`); otherwise the flow fails with `identity_mismatch`, and nothing
/// it produced reaches the registration (its staged cookies go with it; the kinds store tokens
/// and credentials only after `admit` said yes).
package struct IdentityBinding: Sendable {
    package static let mismatch = "identity_mismatch"
    /// A flow that had to say who signed in (its registration has a user, or its destination
    /// requires one) and could not: nothing of it is kept.
    package static let unknown = "identity_unknown"

    package let registrations: any RegistrationRepository
    package let audit: AuditLog
    package let invalidation: @Sendable (UUID) async -> Void
    /// The destinations, for whose users each one takes.
    package let destinations: [String: Destination]
    /// The issuers of the destinations file's identity providers.
    package let listedIssuers: Set<String>

    package enum Verdict: Sendable, Equatable {
        /// The sign-in is the registration's user (or has just become it).
        case admitted
        /// Somebody else signed in: the flow must fail, and keep nothing.
        case mismatch(expectedIssuer: String)
    }

    /// Whether a sign-in is `user`, at `destination`. A user is the pair (issuer, name): the name
    /// must match (exactly, but for ASCII case), and the sign-in must be vouched for in the
    /// user's issuer's namespace: by that issuer itself, or, for a verified user, by an issuer
    /// that is none of the listed providers (the destination's authorization server or SAML IdP)
    /// at a destination that takes the users of the user's provider alone. A sign-in vouched for
    /// by another listed provider is never the user, whatever its name.
    package func sameUser(_ user: RegistrationUser, _ signedIn: SignedInIdentity, destination: String) -> Bool {
        guard user.matchesName(signedIn.subject) else { return false }
        if signedIn.issuer == user.issuer { return true }
        guard user.verified, !listedIssuers.contains(signedIn.issuer), let destination = destinations[destination] else { return false }
        let accepted = destination.identityProviders ?? listedIssuers.sorted()
        return accepted == [user.issuer]
    }

    /// Whether the flow's registration (or its destination) needs every sign-in to say who it was.
    package func needsIdentity(_ flow: FlowRecord) async throws -> Bool {
        guard let registration = try await registrations.find(id: flow.registrationID) else { return true }
        return registration.user != nil || destinations[registration.destination]?.identityRequired == true
    }

    /// Judges a flow's sign-in against its registration's user, binding a registration that
    /// has none yet.
    package func judge(_ flow: FlowRecord, signedIn: SignedInIdentity, logger: Logger) async throws -> Verdict {
        for _ in 0..<2 {
            guard let registration = try await registrations.find(id: flow.registrationID) else {
                return .mismatch(expectedIssuer: "")
            }
            if let user = registration.user {
                if sameUser(user, signedIn, destination: registration.destination) { return .admitted }
                await audit.record(
                    .flowIdentityMismatch, actor: .system, registrationID: registration.id, destination: registration.destination,
                    detail: ["flow": flow.idString, "kind": flow.kind.rawValue, "expectedIssuer": user.issuer, "signedInIssuer": signedIn.issuer])
                logger.warning(
                    "a flow signed in as somebody other than its registration's user; nothing of it is kept",
                    metadata: ["flow.id": .string(flow.idString), "flow.kind": .string(flow.kind.rawValue)])
                return .mismatch(expectedIssuer: user.issuer)
            }
            let user = RegistrationUser(issuer: signedIn.issuer, subject: signedIn.subject, verified: false, match: signedIn.subject)
            if try await registrations.setUser(id: registration.id, user: user) {
                await audit.record(
                    .registrationUserBound, actor: .system, registrationID: registration.id, destination: registration.destination,
                    detail: ["flow": flow.idString, "issuer": signedIn.issuer])
                await invalidation(registration.id)
                return .admitted
            }
            // Another flow bound it first: judge against that user.
        }
        return .mismatch(expectedIssuer: "")
    }

    package init(registrations: any RegistrationRepository, audit: AuditLog, invalidation: @escaping @Sendable (UUID) async -> Void, destinations: [String: Destination], listedIssuers: Set<String>) {
        self.registrations = registrations
        self.audit = audit
        self.invalidation = invalidation
        self.destinations = destinations
        self.listedIssuers = listedIssuers
    }
}
