import AuthFlows
import Foundation
import Hummingbird
import ParleyDomain

/// `/admin/v1/…`: administrators (admin token). Every call is audited.
struct AdminController: Sendable {
    let administration: Administration
    let service: RegistrationService
    let maxJSONBytes: Int

    /// `GET /admin/v1/registrations?destination=&userHint=&issuer=&subject=&client=&limit=&cursor=`
    @Sendable func registrations(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let page = try await administration.list(try RegistrationQuery(request.uri.queryParameters), admin: context.admin)
        return try JSONBody.response(.ok, ListPage(items: page.items.map(AdminRegistrationView.init), nextCursor: page.next?.encoded))
    }

    /// `GET /admin/v1/registrations/{id}`: the registration shape (without the APPCID) and token metadata.
    @Sendable func registration(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let record = try await registration(context)
        return try JSONBody.response(.ok, AdminRegistrationView(try await administration.detail(record, admin: context.admin)))
    }

    /// `DELETE /admin/v1/registrations/{id}`: full teardown, as the client's own DELETE.
    @Sendable func delete(_ request: Request, context: AdminRequestContext) async throws -> Response {
        try await service.deregister(try await registration(context), actor: .admin, logger: context.logger)
        return Response(status: .noContent)
    }

    /// `POST /admin/v1/registrations/{id}/approval`
    @Sendable func approve(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let approved = try await service.approve(try await registration(context), admin: context.admin, logger: context.logger)
        return try JSONBody.response(.ok, RegistrationView(approved.record, appcid: nil, flow: approved.flow?.withoutSecret))
    }

    /// `POST /admin/v1/revocations`
    @Sendable func revoke(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let input = try await JSONBody.decode(RevocationRequest.self, from: request, limit: maxJSONBytes)
        let outcome = try await administration.revoke(try input.revocation(), admin: context.admin, logger: context.logger)
        return try JSONBody.response(.ok, RevocationView(outcome))
    }

    /// `GET /admin/v1/audit?since=&limit=&cursor=`
    @Sendable func auditEvents(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let page = try await administration.auditPage(try AuditQuery(request.uri.queryParameters), admin: context.admin)
        return try JSONBody.response(.ok, ListPage(items: page.events.map(AuditEventView.init), nextCursor: page.next?.encoded))
    }

    /// `GET /admin/v1/events?type=&registrationId=&limit=&cursor=`
    @Sendable func events(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let page = try await administration.eventPage(try EventQuery(request.uri.queryParameters), admin: context.admin)
        return try JSONBody.response(.ok, ListPage(items: page.events.map(EventView.init), nextCursor: page.next?.encoded))
    }

    /// `POST /admin/v1/events/{id}/redelivery`: `202`; the event goes out again to every endpoint that covers it.
    @Sendable func redeliver(_ request: Request, context: AdminRequestContext) async throws -> Response {
        guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)) else { throw RegistrationError.notFound }
        try await administration.redeliver(event: id, admin: context.admin, logger: context.logger)
        return Response(status: .accepted)
    }

    /// The registration the path names; `404` for an unknown id and for one that is not a UUID.
    private func registration(_ context: AdminRequestContext) async throws -> RegistrationRecord {
        guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)) else { throw RegistrationError.notFound }
        return try await administration.registration(id: id)
    }
}

// MARK: - Input

/// `limit` from a query: 1…500, 50 when absent.
private func pageLimit(_ query: Parameters) throws(InvalidInput) -> Int {
    guard let text = query.get("limit") else { return Administration.defaultLimit }
    guard let limit = Int(text), (1...Administration.maxLimit).contains(limit) else { throw .limit(max: Administration.maxLimit) }
    return limit
}

/// A checked `cursor` as the position Parley handed out (in the audit or the event list); nil when absent.
private func decodedCursor(_ cursor: String?) throws(InvalidInput) -> AuditCursor? {
    guard let cursor else { return nil }
    guard let decoded = AuditCursor(encoded: cursor) else { throw .cursor }
    return decoded
}

extension RegistrationQuery {
    /// `?destination=&userHint=&issuer=&subject=&client=&limit=&cursor=`, checked in that order.
    init(_ query: Parameters) throws(InvalidInput) {
        let destination = try InvalidInput.checkedText(query.get("destination"), "destination")
        let userHint = try InvalidInput.checkedText(query.get("userHint"), "userHint")
        let issuer = try InvalidInput.checkedText(query.get("issuer"), "issuer")
        let subject = try InvalidInput.checkedText(query.get("subject"), "subject")
        let client = try InvalidInput.checkedText(query.get("client"), "client")
        let limit = try pageLimit(query)
        var after: RegistrationCursor?
        if let cursor = try InvalidInput.checkedText(query.get("cursor"), "cursor") {
            guard let decoded = RegistrationCursor(encoded: cursor) else { throw .cursor }
            after = decoded
        }
        self.init(destination: destination, userHint: userHint, issuer: issuer, subject: subject, client: client, limit: limit, after: after)
    }
}

extension AuditQuery {
    /// `?since=&limit=&cursor=`: the text of each checked first, then `since` and `cursor` read.
    init(_ query: Parameters) throws(InvalidInput) {
        let since = try InvalidInput.checkedText(query.get("since"), "since")
        let limit = try pageLimit(query)
        let cursor = try InvalidInput.checkedText(query.get("cursor"), "cursor")
        var from: Date?
        if let since {
            guard let date = try? Date(since, strategy: .iso8601) else { throw .since }
            from = date
        }
        self.init(since: from, limit: limit, before: try decodedCursor(cursor))
    }
}

extension EventQuery {
    /// `?type=&registrationId=&limit=&cursor=`, checked in that order.
    init(_ query: Parameters) throws(InvalidInput) {
        var type: LifecycleEventType?
        if let text = try InvalidInput.checkedText(query.get("type"), "type", maxBytes: 100) {
            guard let known = LifecycleEventType(rawValue: text) else { throw .eventType }
            type = known
        }
        var registration: UUID?
        if let text = try InvalidInput.checkedText(query.get("registrationId"), "registrationId", maxBytes: 100) {
            guard let id = UUID(uuidString: text) else { throw .uuid(field: "registrationId") }
            registration = id
        }
        let limit = try pageLimit(query)
        let cursor = try InvalidInput.checkedText(query.get("cursor"), "cursor")
        self.init(type: type, registrationID: registration, limit: limit, before: try decodedCursor(cursor))
    }
}

/// `POST /admin/v1/revocations` input. Unknown members are ignored; wrong types are refused.
struct RevocationRequest: Decodable, Sendable {
    var registrationId: String?
    var destination: String?
    var userHint: String?
    var scopeKey: String?
    /// Every registration of this user, on every destination.
    var user: User?
    /// Every registration of this agent client, on every destination.
    var client: String?
    var upstream: Bool?

    struct User: Decodable, Sendable {
        var issuer: String
        var subject: String
    }

    /// The typed revocation: `registrationId` a UUID, the other filters (and the user's
    /// `issuer` and `subject`, and `client`) 1 to 2048 bytes without control characters (checked in that order).
    func revocation() throws(InvalidInput) -> Revocation {
        var filter = RevocationFilter(destination: destination, userHint: userHint, scopeKey: scopeKey)
        if let registrationId {
            guard let id = UUID(uuidString: registrationId) else { throw .uuid(field: "registrationId") }
            filter.registrationID = id
        }
        _ = try InvalidInput.checkedText(destination, "destination")
        _ = try InvalidInput.checkedText(userHint, "userHint")
        _ = try InvalidInput.checkedText(scopeKey, "scopeKey")
        if let user {
            _ = try InvalidInput.checkedText(user.issuer, "user.issuer")
            _ = try InvalidInput.checkedText(user.subject, "user.subject")
            filter.user = UserReference(issuer: user.issuer, subject: user.subject)
        }
        filter.client = try InvalidInput.checkedText(client, "client")
        return Revocation(filter: filter, upstream: upstream == true)
    }
}

// MARK: - Answers

extension FlowView {
    /// The flow as administrators see it: `url` is `null`. The URL carries the flow's secret, and
    /// whoever opens it can sign in for the registration; it belongs to the registration's client.
    var withoutSecret: FlowView {
        var view = self
        view.url = nil
        return view
    }
}

/// `{"items": [...], "nextCursor": string|null}`: a page of a newest-first list.
struct ListPage<Item: Encodable & Sendable>: Encodable, Sendable {
    let items: [Item]
    @Nullable var nextCursor: String?
}

/// The admin registration object: the registration object with `appcid` always `null`,
/// plus `tokens` (metadata, never a value).
struct AdminRegistrationView: Encodable, Sendable {
    let registration: RegistrationView
    let tokens: [TokenView]

    init(_ admin: AdminRegistration) {
        registration = RegistrationView(admin.record, appcid: nil, flow: admin.flow?.withoutSecret)
        tokens = admin.tokens.map(TokenView.init)
    }

    private enum CodingKeys: String, CodingKey { case tokens }

    /// The registration's members and `tokens`, in one object.
    func encode(to encoder: any Encoder) throws {
        try registration.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(tokens, forKey: .tokens)
    }

    struct TokenView: Encodable, Sendable {
        let kind: String
        let scopeKey: String
        @Nullable var expiresAt: Date?
        @Nullable var lastUsedAt: Date?

        init(_ token: TokenMetadata) {
            kind = token.kind
            scopeKey = token.scopeKey
            expiresAt = token.expiresAt
            lastUsedAt = token.lastUsedAt
        }
    }
}

/// `{"revoked": n, "upstream": {"attempted": n, "failed": n} | null}`
struct RevocationView: Encodable, Sendable {
    let revoked: Int
    @Nullable var upstream: Upstream?

    struct Upstream: Encodable, Sendable {
        let attempted: Int
        let failed: Int
    }

    init(_ outcome: RevocationOutcome) {
        revoked = outcome.revoked
        upstream = outcome.upstream.map { Upstream(attempted: $0.attempted, failed: $0.failed) }
    }
}

/// An audit event: `detail` holds strings only and never a secret.
struct AuditEventView: Encodable, Sendable {
    let id: Int64
    let at: Date
    let actor: String
    let action: String
    @Nullable var registrationId: UUID?
    @Nullable var destination: String?
    let detail: [String: String]

    init(_ stored: StoredAuditEvent) {
        id = stored.id
        at = stored.at
        actor = stored.event.actor.rawValue
        action = stored.event.action
        registrationId = stored.event.registrationID
        destination = stored.event.destination
        detail = stored.event.detail
    }
}

/// An event as `GET /admin/v1/events` lists it: what its webhooks receive (`LifecycleEventBody`,
/// the same members), plus `deliveries`.
struct EventView: Encodable, Sendable {
    let event: LifecycleEventBody
    let deliveries: [Delivery]

    struct Delivery: Encodable, Sendable {
        let endpoint: String
        let status: String
        let attempts: Int
        @Nullable var nextAttemptAt: Date?
        @Nullable var lastAttemptAt: Date?
        @Nullable var lastStatus: Int?
        @Nullable var lastError: String?
        @Nullable var deliveredAt: Date?
        /// Every attempt, oldest first (the last 20).
        let history: [Attempt]
    }

    struct Attempt: Encodable, Sendable {
        let at: Date
        @Nullable var status: Int?
        @Nullable var error: String?
    }

    init(_ event: StoredLifecycleEvent) {
        self.event = LifecycleEventBody(event)
        deliveries = event.deliveries.map {
            Delivery(
                endpoint: WebhookEndpoint.display($0.endpoint), status: $0.status.rawValue, attempts: $0.attempts, nextAttemptAt: $0.nextAttemptAt,
                lastAttemptAt: $0.lastAttemptAt, lastStatus: $0.lastStatus, lastError: $0.lastError, deliveredAt: $0.deliveredAt,
                history: $0.history.map { Attempt(at: $0.at, status: $0.status, error: $0.error) })
        }
    }

    private enum CodingKeys: String, CodingKey { case deliveries }

    /// The event's own members, then `deliveries`, in one object.
    func encode(to encoder: any Encoder) throws {
        try event.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(deliveries, forKey: .deliveries)
    }
}
