import AuthFlows
import Foundation
import Logging
import ParleyEncoding

/// `POST /admin/v1/revocations` input.
struct RevocationRequest: Decodable {
    var registrationId: String?
    var destination: String?
    var userHint: String?
    var scopeKey: String?
    var upstream: Bool?
}

/// What administrators may see and do: registrations with their token metadata (never a
/// value), teardown, approval, revocation (locally, and at the upstream's RFC 7009
/// endpoint), and the audit log. Every call is audited with the admin's identity.
struct Administration: Sendable {
    static let defaultLimit = 50
    static let maxLimit = 500

    let repository: any AdministrationRepository
    let registrations: any RegistrationRepository
    let service: RegistrationService
    let conversations: Conversations
    let invalidation: CacheInvalidation
    let audit: AuditLog

    /// `limit` from a query: 1…500, default 50.
    static func limit(_ text: String?) throws(Problem) -> Int {
        guard let text else { return defaultLimit }
        guard let n = Int(text), (1...maxLimit).contains(n) else { throw Problem.invalid("limit must be a whole number from 1 to \(maxLimit)") }
        return n
    }

    func registration(id text: String?) async throws -> RegistrationRecord {
        guard let id = text.flatMap(UUID.init(uuidString:)), let record = try await registrations.find(id: id) else {
            throw Problem.notFound("no such registration")
        }
        return record
    }

    /// The newest-first page after `cursor`.
    func list(destination: String?, userHint: String?, limit: Int, cursor: String?, admin: AdminIdentity) async throws -> JSONValue {
        var after: RegistrationCursor?
        if let cursor {
            guard let decoded = RegistrationCursor(encoded: cursor) else { throw Problem.invalid("cursor is not one Parley handed out") }
            after = decoded
        }
        let page = try await repository.registrations(RegistrationQuery(destination: destination, userHint: userHint, limit: limit, after: after))
        let tokens = try await repository.tokenMetadata(registrationIDs: page.map(\.0.id))
        var items: [JSONValue] = []
        for (record, _) in page { items.append(try await view(record, tokens: tokens[record.id] ?? [])) }
        await audit.record(
            "admin.registrations.listed", actor: .admin, destination: destination,
            detail: ["admin": admin.name, "count": String(items.count)])
        return .object(["items": .array(items), "nextCursor": page.count == limit ? .optional(page.last?.1.encoded) : .null])
    }

    func detail(_ record: RegistrationRecord, admin: AdminIdentity) async throws -> JSONValue {
        let tokens = try await repository.tokenMetadata(registrationIDs: [record.id])[record.id] ?? []
        await audit.record(
            "admin.registration.read", actor: .admin, registrationID: record.id, destination: record.destination, detail: ["admin": admin.name])
        return try await view(record, tokens: tokens)
    }

    /// The registration shape (without the APPCID, with the flow a `login_required` one waits on) plus token metadata.
    func view(_ record: RegistrationRecord, tokens: [TokenMetadata]) async throws -> JSONValue {
        let flow = try await service.pendingFlow(of: record)
        guard case .object(var object) = try service.view(record, flow: flow, showAppcid: false) else { return .null }
        object["tokens"] = .array(
            tokens.map {
                .object([
                    "kind": .string($0.kind), "scopeKey": .string($0.scopeKey),
                    "expiresAt": .optional($0.expiresAt.map(RFC3339.format)), "lastUsedAt": .optional($0.lastUsedAt.map(RFC3339.format)),
                ])
            })
        return .object(object)
    }

    /// Removes the matching credentials; with `upstream`, revokes refresh and access tokens
    /// at the RFC 7009 endpoint first (an upstream failure is reported, the local removal happens).
    func revoke(_ input: RevocationRequest, admin: AdminIdentity, logger: Logger) async throws -> JSONValue {
        var filter = RevocationFilter(destination: input.destination, userHint: input.userHint, scopeKey: input.scopeKey)
        if let id = input.registrationId {
            guard let uuid = UUID(uuidString: id) else { throw Problem.invalid("registrationId must be a UUID") }
            filter.registrationID = uuid
        }
        _ = try Problem.checkedText(input.destination, "destination")
        _ = try Problem.checkedText(input.userHint, "userHint")
        _ = try Problem.checkedText(input.scopeKey, "scopeKey")
        guard !filter.isEmpty else {
            throw Problem.invalid("name at least one of registrationId, destination, userHint, scopeKey: a revocation of everything is refused")
        }
        var attempted = 0
        var failed = 0
        if input.upstream == true {
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
        let revoked = try await repository.revoke(filter)
        if let id = filter.registrationID { await invalidation.changed(id) }
        var detail = ["admin": admin.name, "revoked": String(revoked)]
        if let id = filter.registrationID { detail["registrationId"] = id.uuidString.lowercased() }
        if let hint = filter.userHint { detail["userHint"] = hint }
        if let key = filter.scopeKey { detail["scopeKey"] = key }
        if input.upstream == true {
            detail["upstreamAttempted"] = String(attempted)
            detail["upstreamFailed"] = String(failed)
        }
        await audit.record("admin.revocation", actor: .admin, registrationID: filter.registrationID, destination: filter.destination, detail: detail)
        logger.info("revocation", metadata: ["revoked": "\(revoked)", "upstream.failed": "\(failed)"])
        return .object([
            "revoked": .number(Double(revoked)),
            "upstream": input.upstream == true ? .object(["attempted": .number(Double(attempted)), "failed": .number(Double(failed))]) : .null,
        ])
    }

    /// Newest first, at or after `since`.
    func auditPage(since: String?, limit: Int, cursor: String?, admin: AdminIdentity) async throws -> JSONValue {
        var from: Date?
        if let since {
            guard let date = try? Date(since, strategy: .iso8601) else { throw Problem.invalid("since must be an RFC 3339 date-time") }
            from = date
        }
        var before: Int64?
        if let cursor {
            guard let bytes = Base64.decode(cursor), let text = String(validating: bytes, as: UTF8.self), text.hasPrefix("a:"),
                let id = Int64(text.dropFirst(2))
            else { throw Problem.invalid("cursor is not one Parley handed out") }
            before = id
        }
        let events = try await repository.audit(since: from, before: before, limit: limit)
        await audit.record("admin.audit.read", actor: .admin, detail: ["admin": admin.name, "count": String(events.count)])
        let items: [JSONValue] = events.map { stored in
            .object([
                "id": .number(Double(stored.id)), "at": .string(RFC3339.format(stored.at)), "actor": .string(stored.event.actor.rawValue),
                "action": .string(stored.event.action), "registrationId": .optional(stored.event.registrationID?.uuidString.lowercased()),
                "destination": .optional(stored.event.destination), "detail": .object(stored.event.detail.mapValues { .string($0) }),
            ])
        }
        let next = events.count == limit ? events.last.map { Base64URL.encode(Array("a:\($0.id)".utf8)) } : nil
        return .object(["items": .array(items), "nextCursor": .optional(next)])
    }
}
