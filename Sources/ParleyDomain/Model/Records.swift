public import AuthFlows
public import Conversation
public import Foundation

/// A registration's lifecycle. Stored as text; the raw values are the contract's.
public enum RegistrationStatus: String, Sendable, CaseIterable {
    case active
    case loginRequired = "login_required"
    /// The destination's policy is `approval`: nothing upstream until an administrator approves.
    case pendingApproval = "pending_approval"
    /// Its credentials can no longer be renewed without a person (a refresh token was
    /// rejected); `active` again when a flow completes.
    case reconnectRequired = "reconnect_required"
}

/// The kinds of interactive flow: the ones a conversation can ask for.
public typealias FlowKind = InteractionRequest.Kind

public enum FlowStatus: String, Sendable, CaseIterable {
    case pending, completed, failed, expired
}

/// Why a flow exists: a sign-in for the thin client, or the login an SMP registration waits on.
public enum FlowPurpose: String, Sendable, CaseIterable {
    case login
    case smpRegistration = "smp_registration"
    /// A fresh sign-in a destination's `stepUp` rule asks for before a high-impact call.
    case stepUp = "step_up"
}

/// Whose credentials a registration holds: set once, by a verified identity token when the
/// registration is created (`verified`), else by the sign-in of its first completed flow.
public struct RegistrationUser: Sendable, Equatable {
    /// The identity provider (`iss` of the identity token; for a first sign-in, whoever vouched
    /// for it: the authorization server, the SAML IdP, the destination for Basic).
    public var issuer: String
    public var subject: String
    /// True when an identity token Parley checked named the user.
    public var verified: Bool
    /// The value later sign-ins are compared with, normalised by `RegistrationUser.normalized`:
    /// the destination's `identity.match` claim of the identity token, or the first sign-in's identity.
    public var match: String

    public init(issuer: String, subject: String, verified: Bool, match: String) {
        self.issuer = issuer
        self.subject = subject
        self.verified = verified
        self.match = RegistrationUser.normalized(match)
    }

    /// How a signed-in identity and `match` are made comparable: exactly, but for the case of
    /// ASCII letters. No other folding: Unicode lower-casing would make the Kelvin sign (U+212A)
    /// a `k`, and so another person's name.
    public static func normalized(_ value: String) -> String {
        String(decoding: value.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// Whether the name a sign-in gave is the one this user is compared by.
    public func matchesName(_ signedIn: String) -> Bool { Self.normalized(signedIn) == match }
}

/// A registration as stored, secrets still sealed. A value, kept in one shared object until a
/// copy is changed (copy on write): a proxied request carries its registration through every
/// middleware, and a cache keeps one per active registration, each a reference.
public struct RegistrationRecord: Sendable, Equatable {
    private struct Fields: Equatable {
        var id: UUID
        var destination: String
        var status: RegistrationStatus
        var appcidSealed: [UInt8]?
        var deviceType: String?
        var deviceModel: String?
        var userHint: String?
        var returnUrl: String?
        var credentialsSealed: [UInt8]?
        var clientCertificateSealed: [UInt8]?
        var createdAt: Date
        var user: RegistrationUser?
        var identityTokenSealed: [UInt8]?
        var client: String?
        var signedInAt: Date?
        var browserApp: String?
        /// The id as text, made once (logs and seal bindings use it on every request).
        var idString: String
    }

    /// Changed only while no other record shares it (`fields`).
    private final class Box: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    /// The fields to change, in a box of this record's own (copied first if another shares it);
    /// reads go to `box.fields` directly.
    private var fields: Fields {
        get { box.fields }
        _modify {
            if !isKnownUniquelyReferenced(&box) { box = Box(box.fields) }
            yield &box.fields
        }
    }

    public var id: UUID {
        get { box.fields.id }
        set {
            fields.id = newValue
            fields.idString = newValue.uuidString.lowercased()
        }
    }
    public var destination: String { get { box.fields.destination } set { fields.destination = newValue } }
    public var status: RegistrationStatus { get { box.fields.status } set { fields.status = newValue } }
    public var appcidSealed: [UInt8]? { get { box.fields.appcidSealed } set { fields.appcidSealed = newValue } }
    public var deviceType: String? { get { box.fields.deviceType } set { fields.deviceType = newValue } }
    public var deviceModel: String? { get { box.fields.deviceModel } set { fields.deviceModel = newValue } }
    public var userHint: String? { get { box.fields.userHint } set { fields.userHint = newValue } }
    public var returnUrl: String? { get { box.fields.returnUrl } set { fields.returnUrl = newValue } }
    public var credentialsSealed: [UInt8]? { get { box.fields.credentialsSealed } set { fields.credentialsSealed = newValue } }
    public var clientCertificateSealed: [UInt8]? { get { box.fields.clientCertificateSealed } set { fields.clientCertificateSealed = newValue } }
    public var createdAt: Date { get { box.fields.createdAt } set { fields.createdAt = newValue } }
    /// Whose credentials these are; nil until a verified token or a first sign-in sets it.
    public var user: RegistrationUser? { get { box.fields.user } set { fields.user = newValue } }
    /// The verified user's identity token (`PropagatedIdentity` as JSON), sealed; kept only for
    /// a destination whose propagation grant speaks for the user.
    public var identityTokenSealed: [UInt8]? { get { box.fields.identityTokenSealed } set { fields.identityTokenSealed = newValue } }
    /// The agent's OAuth client (`client_id`, else `azp`, of its access token) for a registration
    /// an agent's JWT access token created on first use; nil for a thin client's registration.
    public var client: String? { get { box.fields.client } set { fields.client = newValue } }
    /// When a person last completed an interactive sign-in for it (any flow); nil: never.
    public var signedInAt: Date? { get { box.fields.signedInAt } set { fields.signedInAt = newValue } }
    /// The browser app a `"browser": true` registration belongs to (its client token is a cookie).
    public var browserApp: String? { get { box.fields.browserApp } set { fields.browserApp = newValue } }

    /// The id as text, made once (logs and seal bindings use it on every request).
    public var idString: String { box.fields.idString }

    public init(
        id: UUID, destination: String, status: RegistrationStatus, appcidSealed: [UInt8]? = nil, deviceType: String?,
        deviceModel: String?, userHint: String?, returnUrl: String?, credentialsSealed: [UInt8]?, clientCertificateSealed: [UInt8]?,
        createdAt: Date, user: RegistrationUser? = nil, identityTokenSealed: [UInt8]? = nil, client: String? = nil, signedInAt: Date? = nil,
        browserApp: String? = nil
    ) {
        box = Box(
            Fields(
                id: id, destination: destination, status: status, appcidSealed: appcidSealed, deviceType: deviceType,
                deviceModel: deviceModel, userHint: userHint, returnUrl: returnUrl, credentialsSealed: credentialsSealed,
                clientCertificateSealed: clientCertificateSealed, createdAt: createdAt, user: user, identityTokenSealed: identityTokenSealed,
                client: client, signedInAt: signedInAt, browserApp: browserApp, idString: id.uuidString.lowercased()))
    }

    public static func == (a: RegistrationRecord, b: RegistrationRecord) -> Bool { a.box === b.box || a.box.fields == b.box.fields }
}

/// A flow row: what every kind has. The URL secret exists only as a hash (also sealed, so
/// its owner can read the URL again); whatever else a kind keeps is its own, sealed in
/// `kindState` (see `FlowKindState`), so this record and the table do not grow per kind.
public struct FlowRecord: Sendable, Equatable {
    public var id: UUID
    public var registrationID: UUID
    public var kind: FlowKind
    public var purpose: FlowPurpose
    public var secretHash: [UInt8]
    public var secretSealed: [UInt8]?
    public var scopeKey: String?
    public var status: FlowStatus
    public var error: String?
    public var returnUrl: String?
    /// The upstream URL that met the challenge (basic: retried with the form's
    /// credentials; otp: the OTP form with its additional parameters).
    public var challengeURL: String?
    /// The kind's own state, sealed and bound to this row; opaque to everything but the kind.
    public var kindState: [UInt8]?
    /// Cookies the upstream set through the hosted upstream during this flow (`StagedCookies`,
    /// sealed), kept from the registration's jar until the flow completes as its user.
    public var stagedCookies: [UInt8]?
    public var expiresAt: Date
    public var createdAt: Date

    public var idString: String { id.uuidString.lowercased() }

    public init(
        id: UUID, registrationID: UUID, kind: FlowKind, purpose: FlowPurpose, secretHash: [UInt8], secretSealed: [UInt8]?,
        scopeKey: String?, status: FlowStatus = .pending, error: String? = nil, returnUrl: String?, challengeURL: String? = nil,
        kindState: [UInt8]? = nil, stagedCookies: [UInt8]? = nil, expiresAt: Date, createdAt: Date
    ) {
        self.id = id
        self.registrationID = registrationID
        self.kind = kind
        self.purpose = purpose
        self.secretHash = secretHash
        self.secretSealed = secretSealed
        self.scopeKey = scopeKey
        self.status = status
        self.error = error
        self.returnUrl = returnUrl
        self.challengeURL = challengeURL
        self.kindState = kindState
        self.stagedCookies = stagedCookies
        self.expiresAt = expiresAt
        self.createdAt = createdAt
    }
}

/// Who acted, for the audit log.
public enum AuditActor: String, Sendable { case client, admin, system }

/// One audit event: who did what, when; never a secret.
public struct AuditEvent: Sendable, Equatable {
    public var action: String
    public var actor: AuditActor
    public var registrationID: UUID?
    public var destination: String?
    public var detail: [String: String]

    public init(action: String, actor: AuditActor, registrationID: UUID? = nil, destination: String? = nil, detail: [String: String] = [:]) {
        self.action = action
        self.actor = actor
        self.registrationID = registrationID
        self.destination = destination
        self.detail = detail
    }
}

/// The administrator a valid admin token stands for. Only the token's hash is kept; the
/// identity is its position in `PARLEY_ADMIN_TOKENS`, enough for the audit log.
public struct AdminIdentity: Sendable, Equatable {
    public let index: Int
    public var name: String { "admin-\(index + 1)" }

    package init(index: Int) {
        self.index = index
    }
}

/// A lifecycle event, written with the change it reports (the outbox): its type and its detail
/// (ids and reasons, never a secret). The row adds the registration, destination and user.
public struct LifecycleEvent: Sendable, Equatable {
    public var type: LifecycleEventType
    public var detail: [String: String]

    public init(_ type: LifecycleEventType, detail: [String: String] = [:]) {
        self.type = type
        self.detail = detail
    }
}

/// An event as stored, with its deliveries (one per webhook endpoint it went to).
public struct StoredLifecycleEvent: Sendable, Equatable {
    public var id: UUID
    public var seq: Int64
    public var type: String
    public var at: Date
    public var registrationID: UUID?
    public var destination: String?
    public var user: EventUser?
    public var detail: [String: String]
    public var deliveries: [WebhookDeliveryState]

    public init(
        id: UUID, seq: Int64, type: String, at: Date, registrationID: UUID?, destination: String?, user: EventUser?, detail: [String: String],
        deliveries: [WebhookDeliveryState] = []
    ) {
        self.id = id
        self.seq = seq
        self.type = type
        self.at = at
        self.registrationID = registrationID
        self.destination = destination
        self.user = user
        self.detail = detail
        self.deliveries = deliveries
    }
}

/// The user an event names (the registration's, when it had one).
public struct EventUser: Sendable, Equatable {
    public var issuer: String
    public var subject: String
    public var verified: Bool

    public init(issuer: String, subject: String, verified: Bool) {
        self.issuer = issuer
        self.subject = subject
        self.verified = verified
    }
}

/// One endpoint's delivery of one event: where it stands.
public struct WebhookDeliveryState: Sendable, Equatable {
    public enum Status: String, Sendable { case pending, delivered, failed }
    public var endpoint: String
    public var status: Status
    public var attempts: Int
    public var nextAttemptAt: Date?
    public var lastAttemptAt: Date?
    /// The HTTP status of the last attempt (nil: no answer).
    public var lastStatus: Int?
    /// Why the last attempt failed, in words (no body of the endpoint's answer).
    public var lastError: String?
    public var deliveredAt: Date?
    /// The attempts, oldest first (the last 20).
    public var history: [WebhookAttempt]

    public init(
        endpoint: String, status: Status, attempts: Int, nextAttemptAt: Date?, lastAttemptAt: Date?, lastStatus: Int?, lastError: String?,
        deliveredAt: Date?, history: [WebhookAttempt] = []
    ) {
        self.history = history
        self.endpoint = endpoint
        self.status = status
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastAttemptAt = lastAttemptAt
        self.lastStatus = lastStatus
        self.lastError = lastError
        self.deliveredAt = deliveredAt
    }
}

/// One attempt to deliver an event: when, the endpoint's HTTP status (nil: no answer), and why
/// it failed in words (nil: delivered).
public struct WebhookAttempt: Sendable, Equatable {
    public var at: Date
    public var status: Int?
    public var error: String?

    public init(at: Date, status: Int?, error: String?) {
        self.at = at
        self.status = status
        self.error = error
    }
}

/// A delivery one instance holds the lease of and sends now.
public struct DueDelivery: Sendable, Equatable {
    public var event: StoredLifecycleEvent
    public var endpoint: String
    /// Attempts before this one.
    public var attempts: Int

    public init(event: StoredLifecycleEvent, endpoint: String, attempts: Int) {
        self.event = event
        self.endpoint = endpoint
        self.attempts = attempts
    }
}
