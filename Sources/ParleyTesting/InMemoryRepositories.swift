public import AuthFlows
public import Conversation
public import Foundation
public import ParleyServer
public import ParleyDomain
import Synchronization

// In-memory twins of the server's repositories, for the router test tier: the same
// protocols as the PostgreSQL implementations, state in a Mutex, no I/O.

public final class InMemoryRegistrations: RegistrationRepository {
    private let rows = Mutex<[UUID: (record: RegistrationRecord, tokenHash: [UInt8])]>([:])
    /// Where the events written with a change go (nil: nowhere).
    private let outbox = Mutex<InMemoryEvents?>(nil)

    public init() {}

    /// Writes the events of its changes to `events`, as PostgreSQL writes them with the change.
    public func publish(to events: InMemoryEvents) { outbox.withLock { $0 = events } }

    public var all: [RegistrationRecord] { rows.withLock { $0.values.map(\.record) } }

    public func insert(_ registration: RegistrationRecord, clientTokenHash: [UInt8]) async throws {
        rows.withLock { $0[registration.id] = (registration, clientTokenHash) }
    }

    public func find(clientTokenHash: [UInt8]) async throws -> RegistrationRecord? {
        rows.withLock { rows in rows.values.first { $0.tokenHash == clientTokenHash }?.record }
    }

    public func find(id: UUID) async throws -> RegistrationRecord? { rows.withLock { $0[id]?.record } }

    public func insertAgent(_ registration: RegistrationRecord, clientTokenHash: [UInt8]) async throws -> RegistrationRecord {
        rows.withLock { rows in
            if let existing = rows.values.first(where: { Self.key(of: $0.record) == Self.key(of: registration) && $0.record.client != nil }) {
                return existing.record
            }
            rows[registration.id] = (registration, clientTokenHash)
            return registration
        }
    }

    public func find(agent: AgentKey) async throws -> RegistrationRecord? {
        rows.withLock { rows in rows.values.first { Self.key(of: $0.record) == agent }?.record }
    }

    private static func key(of record: RegistrationRecord) -> AgentKey? {
        guard let user = record.user, let client = record.client else { return nil }
        return AgentKey(destination: record.destination, issuer: user.issuer, subject: user.subject, client: client)
    }

    public func activate(id: UUID, appcidSealed: [UInt8]?) async throws {
        rows.withLock {
            $0[id]?.record.status = .active
            $0[id]?.record.appcidSealed = appcidSealed
        }
    }

    public func setStatus(_ status: RegistrationStatus, id: UUID) async throws { rows.withLock { $0[id]?.record.status = status } }

    public func changeStatus(from: RegistrationStatus, to: RegistrationStatus, id: UUID, event: LifecycleEvent?) async throws -> Bool {
        let changed = rows.withLock { rows -> RegistrationRecord? in
            guard rows[id]?.record.status == from else { return nil }
            rows[id]?.record.status = to
            return rows[id]?.record
        }
        if let changed, let event { outbox.withLock { $0 }?.record(event, registration: changed) }
        return changed != nil
    }

    public func setCredentials(id: UUID, sealed: [UInt8]) async throws { rows.withLock { $0[id]?.record.credentialsSealed = sealed } }
    public func setSignedIn(id: UUID, at: Date) async throws { rows.withLock { $0[id]?.record.signedInAt = at } }
    public func setIdentityToken(id: UUID, sealed: [UInt8]) async throws { rows.withLock { $0[id]?.record.identityTokenSealed = sealed } }

    /// Forgets a registration's kept identity (a revocation); true when it had one.
    public func clearIdentityToken(id: UUID) -> Bool {
        rows.withLock { rows in
            guard rows[id]?.record.identityTokenSealed != nil else { return false }
            rows[id]?.record.identityTokenSealed = nil
            return true
        }
    }

    public func setUser(id: UUID, user: RegistrationUser) async throws -> Bool {
        rows.withLock { rows in
            guard rows[id] != nil, rows[id]?.record.user == nil else { return false }
            rows[id]?.record.user = user
            return true
        }
    }

    @discardableResult
    public func delete(id: UUID, event: LifecycleEvent?) async throws -> Bool {
        let removed = rows.withLock { $0.removeValue(forKey: id)?.record }
        if let removed, let event { outbox.withLock { $0 }?.record(event, registration: removed) }
        return removed != nil
    }
}

public final class InMemoryFlows: FlowRepository {
    private let rows = Mutex<[UUID: (flow: FlowRecord, callbackHash: [UInt8]?)]>([:])
    /// Where the events written with a flow's end go (nil: nowhere).
    private let outbox = Mutex<InMemoryEvents?>(nil)

    public init() {}

    /// Writes the events of its changes to `events`, as PostgreSQL writes them with the change.
    public func publish(to events: InMemoryEvents) { outbox.withLock { $0 = events } }

    public var all: [FlowRecord] { rows.withLock { $0.values.map(\.flow) } }

    public func insert(_ flow: FlowRecord) async throws { rows.withLock { $0[flow.id] = (flow, nil) } }

    public func replaceKindState(id: UUID, expected: [UInt8]?, with state: [UInt8]?, callbackHash: [UInt8]?) async throws -> Bool {
        rows.withLock { rows in
            guard var row = rows[id], row.flow.status == .pending, row.flow.kindState == expected else { return false }
            row.flow.kindState = state
            row.callbackHash = callbackHash
            rows[id] = row
            return true
        }
    }

    public func replaceStagedCookies(id: UUID, expected: [UInt8]?, with cookies: [UInt8]?) async throws -> Bool {
        rows.withLock { rows in
            guard var row = rows[id], row.flow.status == .pending, row.flow.stagedCookies == expected else { return false }
            row.flow.stagedCookies = cookies
            rows[id] = row
            return true
        }
    }

    public func claim(callbackHash: [UInt8]) async throws -> FlowRecord? {
        rows.withLock { rows in
            guard let (id, row) = rows.first(where: { $0.value.callbackHash == callbackHash && $0.value.flow.status == .pending }) else {
                return nil
            }
            rows[id]?.callbackHash = nil
            return row.flow
        }
    }

    public func latest(registrationID: UUID, purpose: FlowPurpose) async throws -> FlowRecord? {
        rows.withLock { rows in
            rows.values.map(\.flow).filter { $0.registrationID == registrationID && $0.purpose == purpose }.max { $0.createdAt < $1.createdAt }
        }
    }

    /// How many times `find(id:)` was asked: the reads a request cost.
    public var finds: Int { findCount.withLock { $0 } }
    private let findCount = Mutex(0)

    public func find(id: UUID) async throws -> FlowRecord? {
        findCount.withLock { $0 += 1 }
        return rows.withLock { $0[id]?.flow }
    }

    public func finish(id: UUID, status: FlowStatus, error: String?, at: Date, event: LifecycleEvent?) async throws -> Bool {
        let finished = rows.withLock { rows -> FlowRecord? in
            guard var row = rows[id], row.flow.status == .pending else { return nil }
            row.flow.status = status
            row.flow.error = error
            row.flow.kindState = nil
            row.flow.stagedCookies = nil
            row.callbackHash = nil
            rows[id] = row
            return row.flow
        }
        if let finished, let event, let events = outbox.withLock({ $0 }) {
            try await events.append(event, registrationID: finished.registrationID, destination: nil)
        }
        return finished != nil
    }
}

public final class InMemoryCookies: CookieRepository {
    let jars = Mutex<[String: [StoredCookie]]>([:])

    public init() {}

    public func forget(registrationID: String) {}

    public func setCaching(_ enabled: Bool) {}

    public func cookies(registrationID: String) async throws -> [StoredCookie] { jars.withLock { $0[registrationID] ?? [] } }

    public func apply(registrationID: String, store add: [StoredCookie], delete: [(name: String, domain: String, path: String)]) async throws {
        jars.withLock { jars in
            var jar = jars[registrationID] ?? []
            let gone = delete.map { "\($0.name)|\($0.domain)|\($0.path)" } + add.map { "\($0.name)|\($0.domain)|\($0.path)" }
            jar.removeAll { gone.contains("\($0.name)|\($0.domain)|\($0.path)") }
            jars[registrationID] = jar + add
        }
    }
}

public final class InMemoryTokens: TokenRepository {
    let rows = Mutex<[TokenKey: (token: StoredToken, kind: String)]>([:])
    private let lock = AsyncLock()

    public init() {}

    public func load(_ key: TokenKey) async throws -> StoredToken? { rows.withLock { $0[key]?.token } }

    public func forget(key: String?, registrationID: UUID?) {}

    public func setCaching(_ enabled: Bool) {}

    public func exclusively<T: Sendable>(_ key: TokenKey, _ body: @Sendable (any TokenAccess) async throws -> T) async throws -> T {
        try await lock.run { try await body(Access(rows: self)) }
    }

    public func markUsed(_ uses: [TokenKey: Date]) async throws {}

    public func expiring(destinations: [String], kinds: [String], before: Date, limit: Int) async throws -> [(TokenKey, StoredToken)] {
        rows.withLock { rows in
            rows.filter {
                destinations.contains($0.key.destination) && kinds.contains($0.value.kind) && $0.key.registrationID != nil
                    && $0.value.token.refreshToken != nil
            }
                .compactMap { entry in entry.value.token.expiresAt.flatMap { $0 < before ? (entry.key, entry.value.token, $0) : nil } }
                .sorted { $0.2 < $1.2 }.prefix(limit).map { ($0.0, $0.1) }
        }
    }

    public func tokens(registrationID: UUID) async throws -> [(TokenKey, StoredToken)] {
        let id = registrationID.uuidString.lowercased()
        return rows.withLock { rows in rows.filter { $0.key.registrationID == id }.map { ($0.key, $0.value.token) } }
    }

    private struct Access: TokenAccess {
        let rows: InMemoryTokens
        func load(_ key: TokenKey) async throws -> StoredToken? { rows.rows.withLock { $0[key]?.token } }
        func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {
            rows.rows.withLock { $0[key] = (token, grant.rawValue) }
        }
        func delete(_ key: TokenKey) async throws { _ = rows.rows.withLock { $0.removeValue(forKey: key) } }
    }
}

public final class InMemoryAudit: AuditRepository {
    let log = Mutex<[StoredAuditEvent]>([])

    public init() {}

    public var events: [AuditEvent] { log.withLock { $0.map(\.event) } }

    public func append(_ event: AuditEvent) async throws {
        log.withLock { $0.append(StoredAuditEvent(id: Int64($0.count + 1), at: Date(), event: event)) }
    }
}

/// The administration queries over the other in-memory twins.
public final class InMemoryAdministration: AdministrationRepository {
    let registrations: InMemoryRegistrations
    let tokens: InMemoryTokens
    let cookies: InMemoryCookies
    let log: InMemoryAudit
    /// Where a revocation's events go (nil: nowhere).
    private let outbox = Mutex<InMemoryEvents?>(nil)

    /// Writes a revocation's events to `events`, as PostgreSQL writes them in its transaction.
    public func publish(to events: InMemoryEvents) { outbox.withLock { $0 = events } }

    public init(registrations: InMemoryRegistrations, tokens: InMemoryTokens, cookies: InMemoryCookies, audit: InMemoryAudit) {
        self.registrations = registrations
        self.tokens = tokens
        self.cookies = cookies
        self.log = audit
    }

    static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }

    public func registrations(_ q: RegistrationQuery) async throws -> [(RegistrationRecord, RegistrationCursor)] {
        let sorted = registrations.all
            .filter { (q.destination == nil || $0.destination == q.destination) && (q.userHint == nil || $0.userHint == q.userHint) }
            .filter { (q.issuer == nil || $0.user?.issuer == q.issuer) && (q.subject == nil || $0.user?.subject == q.subject) }
            .filter { q.client == nil || $0.client == q.client }
            .map { ($0, RegistrationCursor(createdAtMicros: Self.micros($0.createdAt), id: $0.id)) }
            .sorted { ($0.1.createdAtMicros, $0.1.id.uuidString) > ($1.1.createdAtMicros, $1.1.id.uuidString) }
        let after = sorted.filter { item in
            guard let cursor = q.after else { return true }
            return (item.1.createdAtMicros, item.1.id.uuidString) < (cursor.createdAtMicros, cursor.id.uuidString)
        }
        return Array(after.prefix(q.limit))
    }

    public func tokenMetadata(registrationIDs: [UUID]) async throws -> [UUID: [TokenMetadata]] {
        let ids = Set(registrationIDs.map { $0.uuidString.lowercased() })
        return tokens.rows.withLock { rows in
            var out: [UUID: [TokenMetadata]] = [:]
            for (key, row) in rows {
                guard let text = key.registrationID, ids.contains(text), let id = UUID(uuidString: text) else { continue }
                out[id, default: []].append(
                    TokenMetadata(registrationID: id, kind: row.kind, scopeKey: key.scopeKey, expiresAt: row.token.expiresAt, lastUsedAt: nil))
            }
            return out
        }
    }

    func matches(_ key: TokenKey, _ f: RevocationFilter) -> Bool {
        let hinted = f.userHint.map { hint in registrations.all.filter { $0.userHint == hint }.map(\.idString) }
        let users = f.user.map { user in registrations.all.filter { Self.isUser($0, user) }.map(\.idString) }
        let clients = f.client.map { client in registrations.all.filter { $0.client == client }.map(\.idString) }
        return (clients == nil || clients?.contains(key.registrationID ?? "") == true)
            && (f.registrationID == nil || key.registrationID == f.registrationID?.uuidString.lowercased())
            && (f.destination == nil || key.destination == f.destination) && (f.scopeKey == nil || key.scopeKey == f.scopeKey)
            && (hinted == nil || hinted?.contains(key.registrationID ?? "") == true)
            && (users == nil || users?.contains(key.registrationID ?? "") == true)
    }

    static func isUser(_ record: RegistrationRecord, _ user: UserReference) -> Bool {
        record.user?.issuer == user.issuer && record.user?.subject == user.subject
    }

    /// The registrations a filter names (by id or by user), narrowed by its registration members.
    func named(_ f: RevocationFilter) -> [RegistrationRecord] {
        guard f.namesRegistrations else { return [] }
        return registrations.all.filter { r in
            (f.registrationID == nil || r.id == f.registrationID) && (f.destination == nil || r.destination == f.destination)
                && (f.userHint == nil || r.userHint == f.userHint) && (f.user.map { Self.isUser(r, $0) } ?? true)
                && (f.client == nil || r.client == f.client)
        }
    }

    public func tokens(matching filter: RevocationFilter) async throws -> [(TokenKey, StoredToken)] {
        tokens.rows.withLock { rows in rows.filter { matches($0.key, filter) }.map { ($0.key, $0.value.token) } }
    }

    public func revoke(_ filter: RevocationFilter) async throws -> RevocationRemoval {
        guard !filter.isEmpty else { return RevocationRemoval(removed: 0, registrations: []) }
        var removed = tokens.rows.withLock { rows in
            let gone = rows.keys.filter { matches($0, filter) }
            for key in gone { rows[key] = nil }
            return gone.count
        }
        let named = named(filter)
        for record in named where cookies.jars.withLock({ $0.removeValue(forKey: record.idString)?.isEmpty == false }) {
            removed += 1
        }
        // Each named registration's event, as PostgreSQL writes it in the revocation's transaction.
        let events = outbox.withLock { $0 }
        for record in named { events?.record(LifecycleEvent(.revoked, detail: ["by": "admin", "reason": "revocation"]), registration: record) }
        for record in named { _ = registrations.clearIdentityToken(id: record.id) }
        return RevocationRemoval(removed: removed, registrations: named.map(\.id))
    }

    public func audit(since: Date?, before: Int64?, limit: Int) async throws -> [StoredAuditEvent] {
        log.log.withLock { events in
            Array(events.reversed().filter { event in since.map { event.at >= $0 } ?? true && before.map { event.id < $0 } ?? true }.prefix(limit))
        }
    }
}

/// Flow signals within one process.
public final class InMemoryFlowSignals: FlowSignals {
    private let waiters = KeyedWaiters<UUID>()

    public init() {}

    public func announce(flowID: UUID) async throws { waiters.wake { $0 == flowID } }

    public func drain() {}

    public func wait(for flowID: UUID, timeout: Duration) async -> Bool {
        await waiters.wait(for: flowID, timeout: timeout)
        return true
    }
}

/// Cache signals within one process: the signal is up from the start.
public final class InMemoryCacheSignals: CacheSignals {
    private let subscribers = Mutex<[AsyncStream<CacheEvent>.Continuation]>([])

    public init() {}

    public func announce(registrationID: UUID) async throws {
        for subscriber in subscribers.withLock({ $0 }) { subscriber.yield(.registration(registrationID)) }
    }

    public func events() -> any AsyncSequence<CacheEvent, Never> & Sendable {
        let (stream, continuation) = AsyncStream<CacheEvent>.makeStream()
        continuation.yield(.all)
        subscribers.withLock { $0.append(continuation) }
        return stream
    }
}

/// A readiness answer a test sets.
public final class StaticReadiness: ReadinessProbe {
    private let ready: Mutex<Bool>
    public init(_ ready: Bool = true) { self.ready = Mutex(ready) }
    public func set(_ value: Bool) { ready.withLock { $0 = value } }
    public func isReady() async -> Bool { ready.withLock { $0 } }
}

/// Mutual exclusion across suspension points, first come first served.
final class AsyncLock: Sendable {
    private let state = Mutex<(locked: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await withCheckedContinuation { c in
            let acquired = state.withLock { s -> Bool in
                if s.locked { s.waiting.append(c); return false }
                s.locked = true
                return true
            }
            if acquired { c.resume() }
        }
        defer {
            let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
                if s.waiting.isEmpty { s.locked = false; return nil }
                return s.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}

extension ParleyDependencies {
    /// Every repository in memory, a fake transport, and the given clock: no sockets, no database.
    /// Every repository in memory; a test that looks into one passes its own twin, and the
    /// administration queries run over the same twins.
    public static func inMemory(
        transport: any Transport = FakeTransport { _ in .text(404) }, clock: any WallClock = TestClock(),
        readiness: StaticReadiness = StaticReadiness(), registrations: InMemoryRegistrations = InMemoryRegistrations(),
        cookies: InMemoryCookies = InMemoryCookies(), tokens: InMemoryTokens = InMemoryTokens(), audit: InMemoryAudit = InMemoryAudit()
    ) -> ParleyDependencies {
        // The outbox in memory: the registrations, flows and revocations write their events to it.
        let events = InMemoryEvents(clock: clock, registrations: registrations)
        registrations.publish(to: events)
        let flows = InMemoryFlows()
        flows.publish(to: events)
        let administration = InMemoryAdministration(registrations: registrations, tokens: tokens, cookies: cookies, audit: audit)
        administration.publish(to: events)
        var dependencies = ParleyDependencies(
            registrations: registrations, flows: flows, cookies: cookies, tokens: tokens, audit: audit, administration: administration,
            flowSignals: InMemoryFlowSignals(), cacheSignals: InMemoryCacheSignals(), readiness: readiness, transport: transport,
            clock: clock)
        dependencies.events = events
        return dependencies
    }
}
