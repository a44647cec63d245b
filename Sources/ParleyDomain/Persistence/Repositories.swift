public import AuthFlows
public import Foundation

// The server's storage, as small protocols. PostgreSQL implements them here
// (`Postgres*`); ParleyTesting has in-memory twins for the router test tier.

/// Registration rows. A client token exists only as its SHA-256.
public protocol RegistrationRepository: Sendable {
    func insert(_ registration: RegistrationRecord, clientTokenHash: [UInt8]) async throws
    /// Inserts an agent's registration (one with `user` and `client`) unless the same (destination,
    /// user, client) already has one; returns whichever row stands, so concurrent first calls agree.
    func insertAgent(_ registration: RegistrationRecord, clientTokenHash: [UInt8]) async throws -> RegistrationRecord
    /// The registration an agent's (destination, user, client) created, or nil.
    func find(agent: AgentKey) async throws -> RegistrationRecord?
    /// The registration whose client token has this SHA-256 (compared in constant time), or nil.
    func find(clientTokenHash: [UInt8]) async throws -> RegistrationRecord?
    func find(id: UUID) async throws -> RegistrationRecord?
    /// `active`, with the APPCID (sealed) the upstream gave, if any.
    func activate(id: UUID, appcidSealed: [UInt8]?) async throws
    func setStatus(_ status: RegistrationStatus, id: UUID) async throws
    /// `from` → `to` when the registration is `from` now; false otherwise (or gone). With `event`,
    /// the event is written in the same statement, only when the status changed.
    func changeStatus(from: RegistrationStatus, to: RegistrationStatus, id: UUID, event: LifecycleEvent?) async throws -> Bool
    /// Credentials a person entered in a hosted form (sealed).
    func setCredentials(id: UUID, sealed: [UInt8]) async throws
    /// A person completed an interactive sign-in for the registration at `at` (step-up rules read it).
    func setSignedIn(id: UUID, at: Date) async throws
    /// Replaces the sealed identity token a propagation grant speaks with.
    func setIdentityToken(id: UUID, sealed: [UInt8]) async throws
    /// Sets the registration's user when it has none yet (a first sign-in); false when it
    /// already had one (or is gone): a user never changes.
    func setUser(id: UUID, user: RegistrationUser) async throws -> Bool
    /// Deletes the registration; its tokens, cookies and flows go with it. With `event`, the event
    /// is written in the same statement, only when a registration went.
    @discardableResult func delete(id: UUID, event: LifecycleEvent?) async throws -> Bool
}

extension RegistrationRepository {
    public func changeStatus(from: RegistrationStatus, to: RegistrationStatus, id: UUID) async throws -> Bool {
        try await changeStatus(from: from, to: to, id: id, event: nil)
    }

    @discardableResult public func delete(id: UUID) async throws -> Bool { try await delete(id: id, event: nil) }
}

/// Lifecycle events (the outbox) and their webhook deliveries.
public protocol EventRepository: Sendable {
    /// An event that reports no row change of its own (`token.refresh_failed`); the registration's
    /// user is read from its row.
    func append(_ event: LifecycleEvent, registrationID: UUID?, destination: String?) async throws
    /// Gives up to `limit` events that have not been fanned out a delivery row for each endpoint
    /// `endpoints` names for their type and destination; how many events it took.
    func fanOut(limit: Int, endpoints: @Sendable (String, String?) -> [String]) async throws -> Int
    /// Leases up to `limit` due deliveries for `lease` (no other instance sends them meanwhile).
    func claimDue(limit: Int, lease: Duration) async throws -> [DueDelivery]
    /// The end of one attempt: `delivered`, or `retryAt` (nil: given up, `failed`).
    func recordAttempt(
        eventID: UUID, endpoint: String, delivered: Bool, status: Int?, error: String?, retryAt: Date?
    ) async throws
    /// Newest first, older than `before` (a `seq`), optionally of one type or registration.
    func list(type: String?, registrationID: UUID?, before: Int64?, limit: Int) async throws -> [StoredLifecycleEvent]
    /// Sends an event again: every delivery pending now, and a delivery for each endpoint that now
    /// covers it; false when there is no such event.
    func redeliver(id: UUID) async throws -> Bool
    /// Deliveries still pending (the backlog).
    func pendingDeliveries() async throws -> Int
}

/// What names an agent's registration: the destination, the user (issuer and subject of the
/// access token) and the OAuth client the token was issued to.
public struct AgentKey: Sendable, Hashable {
    public var destination: String
    public var issuer: String
    public var subject: String
    public var client: String

    public init(destination: String, issuer: String, subject: String, client: String) {
        self.destination = destination
        self.issuer = issuer
        self.subject = subject
        self.client = client
    }
}

/// Flow rows. Each flow finishes once. Nothing here is particular to a kind: a kind keeps
/// its state in the sealed `kindState`, changed by compare-and-set.
public protocol FlowRepository: Sendable {
    func insert(_ flow: FlowRecord) async throws
    /// Replaces a pending flow's kind state when it is still `expected` (compare-and-set), and
    /// files the flow under `callbackHash` for `claim` (nil: under nothing). False when the flow
    /// is no longer pending or its state changed meanwhile (read it again and retry).
    func replaceKindState(id: UUID, expected: [UInt8]?, with state: [UInt8]?, callbackHash: [UInt8]?) async throws -> Bool
    /// Replaces a pending flow's staged cookies when they are still `expected` (compare-and-set).
    func replaceStagedCookies(id: UUID, expected: [UInt8]?, with cookies: [UInt8]?) async throws -> Bool
    /// Claims the pending flow filed under `callbackHash`, exactly once.
    func claim(callbackHash: [UInt8]) async throws -> FlowRecord?
    func latest(registrationID: UUID, purpose: FlowPurpose) async throws -> FlowRecord?
    func find(id: UUID) async throws -> FlowRecord?
    /// Moves a pending flow to a final status (its kind state and staged cookies go); false when
    /// it was no longer pending.
    func finish(id: UUID, status: FlowStatus, error: String?, at: Date, event: LifecycleEvent?) async throws -> Bool
}

extension FlowRepository {
    public func finish(id: UUID, status: FlowStatus, error: String?, at: Date) async throws -> Bool {
        try await finish(id: id, status: status, error: error, at: at, event: nil)
    }
}

/// A registration's cookie jar, plus a way to drop what this instance remembers of it.
public protocol CookieRepository: CookieRecords {
    func forget(registrationID: String)
    /// Follows the cache signal: no caching while it is lost.
    func setCaching(_ enabled: Bool)
}

/// OAuth2 tokens, plus the listing a deregistration revokes.
public protocol TokenRepository: TokenStore {
    func tokens(registrationID: UUID) async throws -> [(TokenKey, StoredToken)]
    /// Drops this instance's cached copy of one token (`TokenKey.description`), of every
    /// token of a registration, or of all tokens (nil, nil).
    func forget(key: String?, registrationID: UUID?)
    /// Follows the cache signal (see `InvalidatedCache.setEnabled`).
    func setCaching(_ enabled: Bool)
    /// When tokens were last sent, in one batch.
    func markUsed(_ uses: [TokenKey: Date]) async throws
    /// Registrations' tokens of `destinations`, of one of `kinds` (grants), with a refresh token,
    /// that expire before `before` and are past half their life (so one that lives less than the
    /// lead is not refreshed on every look), soonest first, at most `limit` (the background
    /// refresh's work). Only the destinations named: tokens of a destination this instance does
    /// not serve (removed from its file) would otherwise sort first, expired, and fill every look.
    func expiring(destinations: [String], kinds: [String], before: Date, limit: Int) async throws -> [(TokenKey, StoredToken)]
}

/// Removes what has outlived its use.
public protocol RetentionRepository: Sendable {
    /// Flows expired before `flowsBefore`, cookies expired before `cookiesBefore`, audit
    /// events older than `auditBefore`; how many of each went.
    func purge(flowsBefore: Date, cookiesBefore: Date, auditBefore: Date) async throws -> (flows: Int, cookies: Int, audit: Int)
}

/// Append-only audit events.
public protocol AuditRepository: Sendable {
    func append(_ event: AuditEvent) async throws
}

/// Wakes long-polls when a flow leaves `pending`, on whichever instance that happened.
public protocol FlowSignals: Sendable {
    func announce(flowID: UUID) async throws
    /// Returns when `flowID` is announced, after `timeout`, or on cancellation; false
    /// when the instance is shutting down and long-polls should answer now.
    func wait(for flowID: UUID, timeout: Duration) async -> Bool
    /// The instance is stopping: every waiting long-poll answers now, and new ones do not wait.
    func drain()
}

/// Whether this instance can serve: the database is reachable and migrated.
public protocol ReadinessProbe: Sendable {
    func isReady() async -> Bool
}

/// What an instance may remember changed somewhere (a revocation, a deregistration, new
/// cookies, an activation): every instance drops it.
public enum CacheEvent: Sendable, Equatable {
    /// One registration's cached state (client-token lookup, cookie jar, managers, CSRF tokens).
    case registration(UUID)
    /// Only a registration's cookie jar changed (new or expired cookies from the upstream).
    case cookieJar(UUID)
    /// One stored OAuth2 token changed (`TokenKey.description`), or, with nil, any number.
    case token(String?)
    /// A revocation's not-before was recorded (`NotBeforeRepository`): reload them.
    case notBefore
    /// Drop everything, then cache again: the signal is (back) up, and notifications
    /// may have been missed before.
    case all
    /// The signal is lost: drop everything and cache nothing until `all`.
    case suspended
}

/// Carries cache invalidations between instances.
public protocol CacheSignals: Sendable {
    func announce(registrationID: UUID) async throws
    /// The events for this instance, from its start.
    func events() -> any AsyncSequence<CacheEvent, Never> & Sendable
}
