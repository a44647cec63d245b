package import Foundation
import ParleyCrypto

/// Finds the registration a client token stands for. Only the token's SHA-256 is
/// looked up. The proxy path keeps answers in a cache that cache signals keep current.
package final class ClientTokens: Sendable {
    package static let maxTokenBytes = 512

    package let registrations: any RegistrationRepository
    package let recent = InvalidatedCache<[UInt8], RegistrationRecord>(owner: { $1.id })
    /// Agents' registrations by (destination, user, client), for `AgentAccess`; kept current with `recent`.
    package let agentRegistrations = InvalidatedCache<AgentKey, RegistrationRecord>(owner: { $1.id })

    package init(registrations: any RegistrationRepository) { self.registrations = registrations }

    /// `beforeLookup` runs when the answer must come from the database (a rate limit may refuse it there).
    package func registration(token: String, cached: Bool, beforeLookup: () throws -> Void = {}) async throws -> RegistrationRecord? {
        guard !token.isEmpty, token.utf8.count <= Self.maxTokenBytes else { return nil }
        let hash = SecretToken.hash(token)
        if cached, let registration = recent.value(for: hash) { return registration }
        try beforeLookup()
        let mark = recent.mark()
        guard let registration = try await registrations.find(clientTokenHash: hash) else { return nil }
        if cached { recent.set(registration, for: hash, readSince: mark) }
        return registration
    }

    /// A registration changed or went away: no cached answer may outlive it.
    package func forget(_ registrationID: UUID) {
        recent.removeAll(owner: registrationID)
        agentRegistrations.removeAll(owner: registrationID)
    }

    /// Caching on or off for both caches (off while the cache signal is lost).
    package func setCaching(_ enabled: Bool) {
        recent.setEnabled(enabled)
        agentRegistrations.setEnabled(enabled)
    }
}
