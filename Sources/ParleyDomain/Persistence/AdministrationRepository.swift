public import AuthFlows
public import Foundation
package import ParleyEncoding

/// A position in the newest-first list of registrations: (created at, id). Keyset
/// paging from it is stable under concurrent inserts: a new registration sorts before
/// every page already handed out, so no page repeats or skips a row.
public struct RegistrationCursor: Sendable, Equatable {
    public let createdAtMicros: Int64
    public let id: UUID

    public init(createdAtMicros: Int64, id: UUID) {
        self.createdAtMicros = createdAtMicros
        self.id = id
    }

    /// Opaque to clients: base64url of `micros:uuid`.
    public var encoded: String { Base64URL.encode(Array("\(createdAtMicros):\(id.uuidString.lowercased())".utf8)) }

    public init?(encoded: String) {
        guard encoded.utf8.count <= 128, let bytes = Base64.decode(encoded), let text = String(validating: bytes, as: UTF8.self) else {
            return nil
        }
        let parts = text.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let micros = Int64(parts[0]), let id = UUID(uuidString: String(parts[1])) else { return nil }
        self.init(createdAtMicros: micros, id: id)
    }
}

/// A position in the newest-first audit log: events older than the one with `id` follow.
public struct AuditCursor: Sendable, Equatable {
    public let id: Int64

    public init(id: Int64) {
        self.id = id
    }

    /// Opaque to clients: base64url of `a:id`.
    public var encoded: String { Base64URL.encode(Array("a:\(id)".utf8)) }

    public init?(encoded: String) {
        guard let bytes = Base64.decode(encoded), let text = String(validating: bytes, as: UTF8.self), text.hasPrefix("a:"),
            let id = Int64(text.dropFirst(2))
        else { return nil }
        self.init(id: id)
    }
}

/// What the admin list asks for; every given member must match.
public struct RegistrationQuery: Sendable, Equatable {
    public var destination: String?
    public var userHint: String?
    /// The registration's user's issuer and subject (each on its own, or both).
    public var issuer: String?
    public var subject: String?
    /// The agent's OAuth client (registrations agents' access tokens created).
    public var client: String?
    public var limit: Int
    public var after: RegistrationCursor?

    public init(
        destination: String? = nil, userHint: String? = nil, issuer: String? = nil, subject: String? = nil, client: String? = nil, limit: Int,
        after: RegistrationCursor? = nil
    ) {
        self.client = client
        self.destination = destination
        self.userHint = userHint
        self.issuer = issuer
        self.subject = subject
        self.limit = limit
        self.after = after
    }
}

/// A registration's user as administrators name it: issuer and subject.
public struct UserReference: Sendable, Equatable {
    public var issuer: String
    public var subject: String

    public init(issuer: String, subject: String) {
        self.issuer = issuer
        self.subject = subject
    }
}

/// A token's metadata for administrators: never its value.
public struct TokenMetadata: Sendable, Equatable {
    public var registrationID: UUID?
    public var kind: String
    public var scopeKey: String
    public var expiresAt: Date?
    public var lastUsedAt: Date?

    public init(registrationID: UUID?, kind: String, scopeKey: String, expiresAt: Date?, lastUsedAt: Date?) {
        self.registrationID = registrationID
        self.kind = kind
        self.scopeKey = scopeKey
        self.expiresAt = expiresAt
        self.lastUsedAt = lastUsedAt
    }
}

/// Which credentials a revocation removes; every given member must match.
public struct RevocationFilter: Sendable, Equatable {
    public var registrationID: UUID?
    public var destination: String?
    public var userHint: String?
    public var scopeKey: String?
    /// Every registration of this user, on every destination (the other members still narrow it).
    public var user: UserReference?
    /// Every registration of this agent client (`client_id`), on every destination (the other members still narrow it).
    public var client: String?

    public init(
        registrationID: UUID? = nil, destination: String? = nil, userHint: String? = nil, scopeKey: String? = nil, user: UserReference? = nil,
        client: String? = nil
    ) {
        self.client = client
        self.registrationID = registrationID
        self.destination = destination
        self.userHint = userHint
        self.scopeKey = scopeKey
        self.user = user
    }

    public var isEmpty: Bool {
        registrationID == nil && destination == nil && userHint == nil && scopeKey == nil && user == nil && client == nil
    }

    /// Whether the filter names registrations, whose cookie jars and kept identity then go too:
    /// by id, user or client, or by destination or user hint unless a scope key narrows it to
    /// tokens (a scope key names tokens, not registrations).
    public var namesRegistrations: Bool {
        registrationID != nil || user != nil || client != nil || (scopeKey == nil && (destination != nil || userHint != nil))
    }
}

/// What a revocation removed: credential records (token rows, cookie jars), and the
/// registrations it named, whose cached state every instance must drop.
public struct RevocationRemoval: Sendable, Equatable {
    public var removed: Int
    public var registrations: [UUID]

    public init(removed: Int, registrations: [UUID]) {
        self.removed = removed
        self.registrations = registrations
    }
}

/// An audit event as stored, with its id and time.
public struct StoredAuditEvent: Sendable, Equatable {
    public var id: Int64
    public var at: Date
    public var event: AuditEvent

    public init(id: Int64, at: Date, event: AuditEvent) {
        self.id = id
        self.at = at
        self.event = event
    }
}

/// The queries and the revocation behind the administration API.
public protocol AdministrationRepository: Sendable {
    /// Newest first; each with the cursor that continues after it.
    func registrations(_ query: RegistrationQuery) async throws -> [(RegistrationRecord, RegistrationCursor)]
    func tokenMetadata(registrationIDs: [UUID]) async throws -> [UUID: [TokenMetadata]]
    /// The tokens a filter matches, opened (for revocation at the upstream before they go).
    func tokens(matching filter: RevocationFilter) async throws -> [(TokenKey, StoredToken)]
    /// Deletes the matching tokens, and the cookie jars of the registrations the filter names
    /// (by id or by user, narrowed by its other members), in one transaction that tells every
    /// instance to drop what it cached of them; returns how many credential records (token
    /// rows, jars) went and which registrations were named.
    func revoke(_ filter: RevocationFilter) async throws -> RevocationRemoval
    /// Newest first, at or after `since`, before the event id `before`.
    func audit(since: Date?, before: Int64?, limit: Int) async throws -> [StoredAuditEvent]
}
