package import AuthFlows
package import Foundation
package import Logging

/// Why an administrative call was refused. Input that breaks a field rule is `InvalidInput`.
package enum AdministrationError: Error, Sendable, Equatable {
    /// A revocation that names no filter would remove every credential.
    case revocationOfEverything
}

/// A revocation: the credentials `filter` matches, and whether to revoke each token at
/// the upstream's RFC 7009 endpoint first.
package struct Revocation: Sendable, Equatable {
    package var filter: RevocationFilter
    package var upstream: Bool

    package init(filter: RevocationFilter, upstream: Bool) {
        self.filter = filter
        self.upstream = upstream
    }
}

/// What a revocation did: credential records removed, and the upstream revocations
/// tried and failed when they were asked for.
package struct RevocationOutcome: Sendable, Equatable {
    package struct Upstream: Sendable, Equatable {
        package var attempted: Int
        package var failed: Int

        package init(attempted: Int, failed: Int) {
            self.attempted = attempted
            self.failed = failed
        }
    }

    package var revoked: Int
    package var upstream: Upstream?

    package init(revoked: Int, upstream: Upstream? = nil) {
        self.revoked = revoked
        self.upstream = upstream
    }
}

/// A registration as administrators see it: the record, the flow a `login_required` one
/// waits on, and its tokens' metadata (never a value).
package struct AdminRegistration: Sendable {
    package let record: RegistrationRecord
    package let flow: FlowView?
    package let tokens: [TokenMetadata]

    package init(record: RegistrationRecord, flow: FlowView? = nil, tokens: [TokenMetadata]) {
        self.record = record
        self.flow = flow
        self.tokens = tokens
    }
}

/// A page of the newest-first registration list; `next` continues after its last item
/// and is nil when the page is not full.
package struct AdminRegistrationPage: Sendable {
    package let items: [AdminRegistration]
    package let next: RegistrationCursor?
}

/// What the audit log is asked for: events at or after `since`, older than the cursor's.
package struct AuditQuery: Sendable, Equatable {
    package var since: Date?
    package var limit: Int
    package var before: AuditCursor?

    package init(since: Date? = nil, limit: Int, before: AuditCursor? = nil) {
        self.since = since
        self.limit = limit
        self.before = before
    }
}

/// A page of audit events, newest first; `next` is nil when the page is not full.
package struct AuditPage: Sendable {
    package let events: [StoredAuditEvent]
    package let next: AuditCursor?
}

/// What administrators may see and do: registrations with their token metadata (never a
/// value), teardown, approval, revocation (locally, and at the upstream's RFC 7009
/// endpoint), and the audit log. Every call is audited with the admin's identity.
package struct Administration: Sendable {
    package static let defaultLimit = 50
    package static let maxLimit = 500

    package let repository: any AdministrationRepository
    package let registrations: any RegistrationRepository
    package let service: RegistrationService
    package let conversations: Conversations
    package let invalidation: CacheInvalidation
    package let audit: AuditLog
    /// The outbox (nil: the in-memory tier, which has none; its event list is empty).
    package let events: (any EventRepository)?
    /// Revocations that stick.
    package let notBefores: NotBefores

    package func registration(id: UUID) async throws -> RegistrationRecord {
        guard let record = try await registrations.find(id: id) else { throw RegistrationError.notFound }
        return record
    }

    /// The newest-first page after `query.after`.
    package func list(_ query: RegistrationQuery, admin: AdminIdentity) async throws -> AdminRegistrationPage {
        let page = try await repository.registrations(query)
        let tokens = try await repository.tokenMetadata(registrationIDs: page.map(\.0.id))
        var items: [AdminRegistration] = []
        for (record, _) in page { items.append(try await registration(record, tokens: tokens[record.id] ?? [])) }
        await audit.record(
            .adminRegistrationsListed, actor: .admin, destination: query.destination,
            detail: ["admin": admin.name, "count": String(items.count)])
        return AdminRegistrationPage(items: items, next: page.count == query.limit ? page.last?.1 : nil)
    }

    package func detail(_ record: RegistrationRecord, admin: AdminIdentity) async throws -> AdminRegistration {
        let tokens = try await repository.tokenMetadata(registrationIDs: [record.id])[record.id] ?? []
        await audit.record(
            .adminRegistrationRead, actor: .admin, registrationID: record.id, destination: record.destination, detail: ["admin": admin.name])
        return try await registration(record, tokens: tokens)
    }

    private func registration(_ record: RegistrationRecord, tokens: [TokenMetadata]) async throws -> AdminRegistration {
        AdminRegistration(record: record, flow: try await service.pendingFlow(of: record), tokens: tokens)
    }

    /// Removes the matching credentials; with `upstream`, revokes refresh and access tokens
    /// at the RFC 7009 endpoint first (an upstream failure is reported, the local removal happens).
    package func revoke(_ revocation: Revocation, admin: AdminIdentity, logger: Logger) async throws -> RevocationOutcome {
        let filter = revocation.filter
        guard !filter.isEmpty else { throw AdministrationError.revocationOfEverything }
        var attempted = 0
        var failed = 0
        if revocation.upstream {
            for (key, token) in try await repository.tokens(matching: filter) {
                guard let destination = conversations.destinations[key.destination], let endpoint = conversations.tokenEndpoint(for: destination),
                    endpoint.settings.revocationEndpoint != nil
                else { continue }
                if let refresh = token.refreshToken {
                    attempted += 1
                    if await !endpoint.revoke(refresh, hint: "refresh_token") { failed += 1 }
                }
                attempted += 1
                if await !endpoint.revoke(token.accessToken, hint: "access_token") { failed += 1 }
            }
        }
        // Who the revocation holds back from now on: the user named, the client named, or the
        // user of the registration named (read before anything of it goes).
        var holdBack: [NotBeforeKey] = []
        if let user = filter.user { holdBack.append(NotBeforeKey(issuer: user.issuer, subject: user.subject)) }
        if let client = filter.client { holdBack.append(.client(client)) }
        if let id = filter.registrationID, let user = try await registrations.find(id: id)?.user {
            holdBack.append(NotBeforeKey(issuer: user.issuer, subject: user.subject))
        }
        let at = service.clock.now
        for key in holdBack { try await notBefores.set(key, at: at) }
        let removal = try await repository.revoke(filter)
        let revoked = removal.removed
        // This instance drops what it cached of them now; the store told the others with the commit.
        for id in removal.registrations { invalidation.apply(.registration(id)) }
        var detail = ["admin": admin.name, "revoked": String(revoked)]
        if let id = filter.registrationID { detail["registrationId"] = id.uuidString.lowercased() }
        if let hint = filter.userHint { detail["userHint"] = hint }
        if let key = filter.scopeKey { detail["scopeKey"] = key }
        if let user = filter.user {
            detail["userIssuer"] = user.issuer
            detail["userSubject"] = user.subject
            detail["registrations"] = String(removal.registrations.count)
        }
        if let client = filter.client {
            detail["client"] = client
            detail["registrations"] = String(removal.registrations.count)
        }
        if !holdBack.isEmpty { detail["notBefore"] = RFC3339.format(at) }
        if revocation.upstream {
            detail["upstreamAttempted"] = String(attempted)
            detail["upstreamFailed"] = String(failed)
        }
        await audit.record(.adminRevocation, actor: .admin, registrationID: filter.registrationID, destination: filter.destination, detail: detail)
        logger.info("revocation", metadata: ["revoked": "\(revoked)", "upstream.failed": "\(failed)"])
        return RevocationOutcome(revoked: revoked, upstream: revocation.upstream ? .init(attempted: attempted, failed: failed) : nil)
    }

    /// OpenID Connect Back-Channel Logout: the identity provider ended `user`'s sessions. Each
    /// logout token is taken once (its `jti` remembered until `expiresAt`); nil for a replay, which
    /// changes nothing. Otherwise every registration of the user, on every destination, loses its
    /// tokens, jars and kept identity, and the user's tokens issued until now are refused (the
    /// not-before), as an administrator's revocation by user does; the credential records removed.
    package func endSessions(of user: UserReference, logoutToken jti: String, expiresAt: Date, logger: Logger) async throws -> Int? {
        guard try await notBefores.repository.takeLogoutToken(issuer: user.issuer, jti: jti, expiresAt: expiresAt) else { return nil }
        let at = service.clock.now
        try await notBefores.set(NotBeforeKey(issuer: user.issuer, subject: user.subject), at: at)
        let removal = try await repository.revoke(RevocationFilter(user: user))
        for id in removal.registrations { invalidation.apply(.registration(id)) }
        // A browser app's registration is the browser's session with Parley: it ends with the
        // user's session at the identity provider (its cookie then names nothing).
        var sessions = 0
        for id in removal.registrations {
            guard let record = try await registrations.find(id: id), record.browserApp != nil else { continue }
            try await service.deregister(record, actor: .system, logger: logger)
            sessions += 1
        }
        await audit.record(
            .backChannelLogout, actor: .system,
            detail: [
                "userIssuer": user.issuer, "userSubject": user.subject, "revoked": String(removal.removed),
                "registrations": String(removal.registrations.count), "browserSessions": String(sessions),
                "notBefore": RFC3339.format(at),
            ])
        logger.info("back-channel logout", metadata: ["revoked": "\(removal.removed)", "registrations": "\(removal.registrations.count)"])
        return removal.removed
    }

    /// Newest first, at or after `query.since`.
    package func auditPage(_ query: AuditQuery, admin: AdminIdentity) async throws -> AuditPage {
        let events = try await repository.audit(since: query.since, before: query.before?.id, limit: query.limit)
        await audit.record(.adminAuditRead, actor: .admin, detail: ["admin": admin.name, "count": String(events.count)])
        return AuditPage(events: events, next: events.count == query.limit ? events.last.map { AuditCursor(id: $0.id) } : nil)
    }

    /// Lifecycle events, newest first, with each endpoint's delivery state.
    package func eventPage(_ query: EventQuery, admin: AdminIdentity) async throws -> EventPage {
        let page = try await events?.list(
            type: query.type?.rawValue, registrationID: query.registrationID, before: query.before?.id, limit: query.limit) ?? []
        await audit.record(.adminEventsRead, actor: .admin, detail: ["admin": admin.name, "count": String(page.count)])
        return EventPage(events: page, next: page.count == query.limit ? page.last.map { AuditCursor(id: $0.seq) } : nil)
    }

    /// Sends an event again to every endpoint that covers it (`404` for an unknown one).
    package func redeliver(event id: UUID, admin: AdminIdentity, logger: Logger) async throws {
        guard let events, try await events.redeliver(id: id) else { throw RegistrationError.notFound }
        await audit.record(.adminEventRedelivery, actor: .admin, detail: ["admin": admin.name, "event": id.uuidString.lowercased()])
        logger.info("event redelivery", metadata: ["event.id": .string(id.uuidString.lowercased())])
    }

    package init(repository: any AdministrationRepository, registrations: any RegistrationRepository, service: RegistrationService, conversations: Conversations, invalidation: CacheInvalidation, audit: AuditLog, events: (any EventRepository)? = nil, notBefores: NotBefores) {
        self.repository = repository
        self.registrations = registrations
        self.service = service
        self.conversations = conversations
        self.invalidation = invalidation
        self.audit = audit
        self.events = events
        self.notBefores = notBefores
    }
}

/// What the event list is asked for: one type, one registration, older than the cursor's.
package struct EventQuery: Sendable, Equatable {
    package var type: LifecycleEventType?
    package var registrationID: UUID?
    package var limit: Int
    package var before: AuditCursor?

    package init(type: LifecycleEventType? = nil, registrationID: UUID? = nil, limit: Int, before: AuditCursor? = nil) {
        self.type = type
        self.registrationID = registrationID
        self.limit = limit
        self.before = before
    }
}

/// A page of events, newest first; `next` is nil when the page is not full.
package struct EventPage: Sendable {
    package let events: [StoredLifecycleEvent]
    package let next: AuditCursor?
}
