package import AuthFlows
package import Conversation
import Foundation
package import Logging
import ParleyCrypto
import Synchronization

/// Agents: Parley as an OAuth 2.1 resource server. In place of a client token, `/v1` takes a
/// JWT access token (RFC 9068) of a listed identity provider whose audience is Parley's
/// resource identifier (`PARLEY_RESOURCE`). The call names its destination in
/// `Parley-Destination`; the registration is the (user, client) pair on that destination,
/// created on first use where the destination says `registration: {implicit: true}`. The
/// access token itself is checked on every call and never kept, logged or sent upstream.
package final class AgentAccess: Sendable {
    /// Names the destination of an agent's call.
    package static let destinationHeader = "Parley-Destination"
    /// At most this many clients get a metrics label of their own per instance; the rest count as `other`.
    package static let maxLabelledClients = 100

    package let resource: String
    /// What an access token's `aud` may say: the resource identifier, and for one without a
    /// path also with its trailing slash (RFC 3986 §6.2.3: the same URI).
    package let audiences: [String]
    /// `…/.well-known/oauth-protected-resource`, named in every `401` of `/v1`.
    package let metadataURL: String
    package let verifier: IdentityTokenVerifier
    package let registrations: any RegistrationRepository
    package let destinations: [String: Destination]
    package let audit: AuditLog
    package let metrics: Metrics
    package let clock: any WallClock
    package let secrets: Secrets
    package let invalidation: CacheInvalidation
    /// Revocations that stick: an agent's token issued before one of its user's or client's is refused.
    package let notBefores: NotBefores
    /// Per registration of a propagation destination, the expiry of the agent's token this
    /// instance last stored as its identity (a newer token replaces it; bounded).
    private let keptUntil = Mutex<[UUID: Date]>([:])
    /// An agent's registration, by (destination, user, client); `ClientTokens` keeps it current.
    package let recent: InvalidatedCache<AgentKey, RegistrationRecord>
    private let labelledClients = Mutex<Set<String>>([])

    package init(
        resource: String, publicURL: String, verifier: IdentityTokenVerifier, registrations: any RegistrationRepository,
        cache: InvalidatedCache<AgentKey, RegistrationRecord>, destinations: [String: Destination], audit: AuditLog, metrics: Metrics,
        clock: any WallClock, secrets: Secrets, invalidation: CacheInvalidation, notBefores: NotBefores
    ) {
        self.notBefores = notBefores
        self.recent = cache
        self.secrets = secrets
        self.invalidation = invalidation
        self.resource = resource
        audiences = URLParts(resource).map { $0.path.isEmpty || $0.path == "/" } == true
            ? [resource.hasSuffix("/") ? String(resource.dropLast()) : resource, resource.hasSuffix("/") ? resource : resource + "/"] : [resource]
        self.metadataURL = publicURL + "/.well-known/oauth-protected-resource"
        self.verifier = verifier
        self.registrations = registrations
        self.destinations = destinations
        self.audit = audit
        self.metrics = metrics
        self.clock = clock
    }

    /// Whether a bearer token is a JWT rather than a client token (`pct_…`, no dots): three
    /// base64url parts separated by two dots.
    package static func isJWT(_ token: String) -> Bool {
        var dots = 0
        for byte in token.utf8 {
            if byte == UInt8(ascii: ".") {
                dots += 1
            } else if !(Base64URLAlphabet.contains(byte)) {
                return false
            }
        }
        return dots == 2
    }

    /// The registration an agent's call speaks for: its access token checked, its destination
    /// taking agents, every scope the destination asks for present; created on first use.
    package func registration(token: String, destinationName: String?, cached: Bool, logger: Logger) async throws -> RegistrationRecord {
        let access: AccessTokenIdentity
        do throws(IdentityTokenError) {
            access = try await verifier.verifyAccessToken(token, resources: audiences)
        } catch {
            logger.info("agent access token refused", metadata: ["identity.check": .string(error.check.rawValue)])
            metrics.increment(.agentRequests, [("destination", "-"), ("client", "-"), ("outcome", "invalid_token")])
            throw invalidToken(error.detail)
        }
        guard let destinationName, !destinationName.isEmpty else {
            throw AgentAccessError.destinationNotNamed
        }
        guard let destination = destinations[destinationName] else {
            throw AgentAccessError.unknownDestination
        }
        let client = clientLabel(access.client)
        guard destination.implicitRegistrations else {
            metrics.increment(.agentRequests, [("destination", destination.name), ("client", client), ("outcome", "forbidden")])
            throw AgentAccessError.agentsNotTaken
        }
        do {
            try await RegistrationService.accept(access.identity, destination: destination, client: access.client, notBefores: notBefores)
        } catch let error as IdentityTokenError {
            logger.info("agent access token refused", metadata: ["identity.check": .string(error.check.rawValue)])
            metrics.increment(.agentRequests, [("destination", destination.name), ("client", client), ("outcome", "invalid_token")])
            throw invalidToken(error.detail)
        }
        guard access.identity.matchValue(claim: destination.identityMatchClaim) != nil else {
            metrics.increment(.agentRequests, [("destination", destination.name), ("client", client), ("outcome", "invalid_token")])
            throw invalidToken(
                "the access token has no usable '\(destination.identityMatchClaim.prefix(200))' claim (an email must be verified), which this destination names its users by")
        }
        let missing = destination.agentScopes.filter { !access.scopes.contains($0) }
        guard missing.isEmpty else {
            metrics.increment(.agentRequests, [("destination", destination.name), ("client", client), ("outcome", "insufficient_scope")])
            logger.info("agent access token lacks scopes", metadata: ["destination": .string(destination.name), "agent.client": .string(access.client)])
            throw insufficientScope(missing: missing, required: destination.agentScopes)
        }
        let key = AgentKey(destination: destination.name, issuer: access.identity.issuer, subject: access.identity.subject, client: access.client)
        var record = try await registration(for: key, access: access, destination: destination, cached: cached, logger: logger)
        record = try await keepIdentity(access, of: record, destination: destination)
        metrics.increment(.agentRequests, [("destination", destination.name), ("client", client), ("outcome", "accepted")])
        return record
    }

    private func registration(
        for key: AgentKey, access: AccessTokenIdentity, destination: Destination, cached: Bool, logger: Logger
    ) async throws -> RegistrationRecord {
        if cached, let record = recent.value(for: key) { return record }
        let mark = recent.mark()
        var record = try await registrations.find(agent: key)
        if record == nil {
            let match = access.identity.matchValue(claim: destination.identityMatchClaim) ?? access.identity.subject
            let id = UUID()
            // A destination whose grant speaks for the user keeps who the user is, never the
            // agent's token: Parley signs its own for the grant.
            let identity = try destination.oauth2?.propagation.map { _ in
                try secrets.seal(identity: PropagatedIdentity(agent: access.client, verified: access.identity), id: id)
            }
            let fresh = RegistrationRecord(
                id: id, destination: destination.name, status: .active, deviceType: nil, deviceModel: nil, userHint: nil, returnUrl: nil,
                credentialsSealed: nil, clientCertificateSealed: nil, createdAt: clock.now,
                user: RegistrationUser(issuer: key.issuer, subject: key.subject, verified: true, match: match), identityTokenSealed: identity,
                client: key.client)
            // Nobody holds a client token for it: the hash of random bytes stands in for one.
            let stored = try await registrations.insertAgent(fresh, clientTokenHash: SecretToken.hash(SecretToken.generate(prefix: "agent_")))
            if stored.id == fresh.id {
                if identity != nil { remember(access, of: stored.id) }
                var detail = ["agent": key.client, "issuer": key.issuer]
                if let actor = access.actor { detail["actor"] = actor }
                await audit.record(.registrationCreated, actor: .client, registrationID: stored.id, destination: destination.name, detail: detail)
                metrics.increment(.registrations, [("action", "created")])
                logger.info(
                    "agent registration created",
                    metadata: ["registration.id": .string(stored.idString), "destination": .string(destination.name), "agent.client": .string(key.client)])
            }
            record = stored
        }
        guard let record else { throw RegistrationError.clientTokenRefused }
        if cached { recent.set(record, for: key, readSince: mark) }
        return record
    }

    /// On a destination whose grant speaks for the user (`token_exchange`, `jwt_bearer`,
    /// `saml2_bearer`), the newest of the agent's tokens is the identity it speaks with: a token
    /// that expires later than the one this instance last stored replaces it (sealed), and every
    /// instance rebuilds the registration's conversation with it. The record returned carries it.
    private func keepIdentity(
        _ access: AccessTokenIdentity, of record: RegistrationRecord, destination: Destination
    ) async throws -> RegistrationRecord {
        guard destination.oauth2?.propagation != nil else { return record }
        let expires = access.identity.expiresAt ?? .distantPast
        // A revocation removed the kept identity: the next admitted token brings it back.
        if record.identityTokenSealed != nil, let kept = keptUntil.withLock({ $0[record.id] }), kept >= expires { return record }
        var updated = record
        let sealed = try secrets.seal(identity: PropagatedIdentity(agent: access.client, verified: access.identity), id: record.id)
        updated.identityTokenSealed = sealed
        try await registrations.setIdentityToken(id: record.id, sealed: sealed)
        await invalidation.changed(record.id)
        remember(access, of: record.id)
        return updated
    }

    private func remember(_ access: AccessTokenIdentity, of id: UUID) {
        keptUntil.withLock { kept in
            if kept.count >= 100_000 { kept.removeAll(keepingCapacity: true) }
            kept[id] = access.identity.expiresAt ?? .distantPast
        }
    }

    /// The client as a metrics label: its own for the first `maxLabelledClients` clients, `other`
    /// after, and for a client id that is not short printable ASCII without quotes or backslashes.
    private func clientLabel(_ client: String) -> String {
        guard client.utf8.count <= 128, client.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") })
        else { return "other" }
        return labelledClients.withLock { known in
            if known.contains(client) { return client }
            guard known.count < Self.maxLabelledClients else { return "other" }
            known.insert(client)
            return client
        }
    }

    /// `WWW-Authenticate` of a `401` on `/v1` (RFC 9728 §5.1), with `error` when there is one (RFC 6750 §3).
    package func challenge(error: String? = nil, scope: [String] = []) -> String {
        var parts = ["realm=\"parley\""]
        if let error { parts.append("error=\"\(error)\"") }
        if !scope.isEmpty { parts.append("scope=\"\(scope.joined(separator: " "))\"") }
        parts.append("resource_metadata=\"\(metadataURL)\"")
        return "Bearer " + parts.joined(separator: ", ")
    }

    private func invalidToken(_ detail: String) -> AgentAccessError {
        .tokenRefused(detail: detail, challenge: challenge(error: "invalid_token"))
    }

    /// `403` naming every scope the destination asks for (which covers every one missing).
    private func insufficientScope(missing: [String], required: [String]) -> AgentAccessError {
        .insufficientScope(missing: missing, challenge: challenge(error: "insufficient_scope", scope: required))
    }

    /// RFC 9728 §2: what an agent (or its SDK) reads to find where to get a token for Parley.
    package func metadata() -> JSONValue {
        let issuers = verifier.providers.keys.sorted()
        var scopes: Set<String> = []
        for destination in destinations.values where destination.implicitRegistrations { scopes.formUnion(destination.agentScopes) }
        return .object([
            "resource": .string(resource),
            "authorization_servers": .array(issuers.map(JSONValue.string)),
            "bearer_methods_supported": .array([.string("header")]),
            "scopes_supported": .array(scopes.sorted().map(JSONValue.string)),
            "resource_name": .string("Parley"),
        ])
    }
}

/// The bytes of base64url (RFC 4648 §5) without padding.
private enum Base64URLAlphabet {
    package static func contains(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }
}

/// Why an agent's access token does not reach a registration. `challenge` is the
/// `WWW-Authenticate` value the edge answers with (RFC 9728 §5.1, RFC 6750 §3).
package enum AgentAccessError: Error, Sendable, Equatable {
    /// No destination in `Parley-Destination`: an access token names no registration by itself.
    case destinationNotNamed
    /// `Parley-Destination` names no configured destination.
    case unknownDestination
    /// The destination takes no agents' access tokens (`registration.implicit` is off).
    case agentsNotTaken
    /// The token did not verify; `detail` names the failed check, never the token.
    case tokenRefused(detail: String, challenge: String)
    /// The token lacks scopes the destination asks for.
    case insufficientScope(missing: [String], challenge: String)
}
