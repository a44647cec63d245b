public import Conversation
public import Foundation
public import Logging
import ParleyCrypto
import Synchronization

/// Joins concurrent callers of the same key onto one piece of work (in-process single flight).
public final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let running = Mutex<[Key: Task<Value, any Error>]>([:])

    public init() {}

    public func run(_ key: Key, _ work: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let task = running.withLock { running -> Task<Value, any Error> in
            if let existing = running[key] { return existing }
            let task = Task { try await work() }
            running[key] = task
            return task
        }
        defer { running.withLock { if $0[key] == task { $0[key] = nil } } }
        return try await task.value
    }
}

/// What a token-changing event was, for the audit log.
public enum TokenEvent: String, Sendable {
    case issued = "token.issued"
    case refreshed = "token.refreshed"
    /// `invalid_grant`: the refresh token was deleted.
    case refreshRejected = "token.refresh_rejected"
    /// Any other failed refresh: every stored token was kept (`outcome` says why).
    case refreshFailed = "token.refresh_failed"
}

/// How a refresh ended, for metrics and the audit log.
public enum RefreshOutcome: String, Sendable, CaseIterable {
    case ok
    /// `invalid_grant`, or an answer lost (the refresh token is taken as spent): the refresh token is gone.
    case permanent
    /// Refused, malformed, 503, 429, or a request that never left: tokens kept, backing off.
    case transient
}

/// Watches token events (audit, metrics); never sees token values.
public protocol TokenEventSink: Sendable {
    func record(_ event: TokenEvent, key: TokenKey, grant: OAuth2Settings.Grant, detail: String?) async
    /// A refresh ended; `ahead` when it was done ahead of need (no call waited for it).
    func refreshed(_ outcome: RefreshOutcome, destination: String, ahead: Bool)
    /// A transient refresh failure of `key` repeated `failures` times in a row (in this process):
    /// said once, when the count reaches the broker's `refreshFailureReport`.
    func refreshKeepsFailing(_ key: TokenKey, grant: OAuth2Settings.Grant, failures: Int, detail: String) async
}

extension TokenEventSink {
    public func refreshKeepsFailing(_ key: TokenKey, grant: OAuth2Settings.Grant, failures: Int, detail: String) async {}
}

/// One call to a token endpoint, for whoever paces such calls (refresh ahead): how long it took,
/// and whether the server said it is loaded (`429`, `503`, a timeout or another lost answer).
/// Only calls that reached for the endpoint are reported: a token another instance had just
/// stored, or a call held back by Parley's own back-off or budget, says nothing of the server.
public struct TokenCallReport: Sendable {
    public let latency: Duration
    public let overloaded: Bool
}

/// What obtaining a token led to.
public enum TokenOutcome: Sendable, Equatable {
    case token(StoredToken)
    /// Only a person can help (authorization code): the caller starts a flow.
    case interactionRequired
}

/// Gets tokens for every OAuth2 destination of this instance: a token another
/// conversation stored meanwhile, else the refresh token, else the grant. One
/// refresh per key at a time in this process (single flight) and across instances
/// (the store's exclusive section, then a re-read). Transient failures keep every
/// stored token and close the key for a while instead of hammering the server.
public final class OAuth2Broker: Sendable {
    let callGate: (any TokenCallGate)?
    let usage: (any TokenUsageSink)?
    let store: any TokenStore
    let clock: any WallClock
    let events: (any TokenEventSink)?
    let logger: Logger
    let skew: TimeInterval
    /// After this many transient refresh failures of one key in a row, the sink hears of it once.
    let refreshFailureReport: Int
    /// Parley's signing keys and issuer, for the assertions of `jwt_bearer` grants (`assertion: parley`).
    let signer: ParleySigningKeys?
    let samlSigner: SAMLAssertionSigning?
    let issuer: String
    /// Whether a propagation grant may still speak with an identity (false: its user, or client,
    /// was revoked after it was given); nil: every identity may.
    let identityGate: (@Sendable (PropagatedIdentity) async throws -> Bool)?
    private let flights = SingleFlight<TokenKey, TokenOutcome>()
    /// Refresh tokens this process took as spent while the store still holds them (a refresh whose
    /// answer was lost, a rotated token that could not be stored): never sent again from here.
    private let spent = SpentRefreshTokens()
    private let backoff = Mutex<[TokenKey: (until: Date, failures: Int, error: OAuth2Error)]>([:])
    /// The most token keys kept in back-off at once.
    static let maxBackoffEntries = 100_000

    public init(
        store: any TokenStore, clock: any WallClock, events: (any TokenEventSink)? = nil, callGate: (any TokenCallGate)? = nil,
        usage: (any TokenUsageSink)? = nil, skew: Duration = .seconds(30), signer: ParleySigningKeys? = nil, samlSigner: SAMLAssertionSigning? = nil,
        issuer: String = "", refreshFailureReport: Int = 5, identityGate: (@Sendable (PropagatedIdentity) async throws -> Bool)? = nil,
        logger: Logger
    ) {
        self.identityGate = identityGate
        self.refreshFailureReport = refreshFailureReport
        self.signer = signer
        self.samlSigner = samlSigner
        self.issuer = issuer
        self.callGate = callGate
        self.usage = usage
        self.store = store
        self.clock = clock
        self.events = events
        self.logger = logger
        self.skew = Double(skew.components.seconds)
    }

    /// The stored token for `key`, fresh or not (nil when none).
    public func stored(_ key: TokenKey) async throws -> StoredToken? {
        try await store.load(key)
    }

    public func isFresh(_ token: StoredToken) -> Bool { token.isFresh(at: clock.now, skew: skew) }

    /// A stored token went out with a request (for its `last_used_at`, written in batches).
    public func noteUse(_ key: TokenKey) { usage?.used(key, at: clock.now) }

    /// A usable token for `key`, replacing `stale` (the token that was refused or expired).
    /// `credentials` serve the password grant, `identity` the propagation grants; `ahead` says
    /// that no call waits for it (the background refresh), for the metrics.
    public func obtain(
        _ key: TokenKey, endpoint: TokenEndpointClient, credentials: UserCredentials?, identity: PropagatedIdentity? = nil,
        stale: StoredToken?, ahead: Bool = false, report: (@Sendable (TokenCallReport) -> Void)? = nil
    ) async throws -> TokenOutcome {
        try await flights.run(key) { [self] in
            try await store.exclusively(key) { access in
                try await self.obtainExclusively(
                    key, access: access, endpoint: endpoint, credentials: credentials, identity: identity, stale: stale, ahead: ahead,
                    report: report)
            }
        }
    }

    /// `endpoint.request`, timed for `report`.
    private func call(
        _ endpoint: TokenEndpointClient, _ parameters: [(String, String)], previousRefreshToken: String? = nil,
        report: (@Sendable (TokenCallReport) -> Void)?
    ) async -> TokenEndpointOutcome {
        let began = ContinuousClock.now
        let outcome = await endpoint.request(parameters, previousRefreshToken: previousRefreshToken)
        if let report {
            let overloaded: Bool
            switch outcome {
            case .transient, .uncertain: overloaded = true
            case .token, .invalidGrant, .refused, .malformed: overloaded = false
            }
            report(TokenCallReport(latency: .now - began, overloaded: overloaded))
        }
        return outcome
    }

    private func obtainExclusively(
        _ key: TokenKey, access: any TokenAccess, endpoint: TokenEndpointClient, credentials: UserCredentials?,
        identity: PropagatedIdentity?, stale: StoredToken?, ahead: Bool, report: (@Sendable (TokenCallReport) -> Void)?
    ) async throws -> TokenOutcome {
        let settings = endpoint.settings
        let current = try await access.load(key)
        // Another conversation or instance may have stored a new token meanwhile.
        if let current, isFresh(current), current.accessToken != stale?.accessToken {
            return .token(current)
        }
        try checkBackoff(key)
        // A refresh token is sent at most once: a server that rotates them and detects reuse
        // (Keycloak, Auth0, django-oauth-toolkit) answers a second use by revoking the whole family.
        let refreshToken = current?.refreshToken.flatMap { spent.contains($0) ? nil : $0 }

        if let current, let refresh = refreshToken {
            try admitCall(key)
            var parameters = [("grant_type", "refresh_token"), ("refresh_token", refresh)]
            if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
            switch await call(endpoint, parameters, previousRefreshToken: refresh, report: report) {
            case .token(let token):
                // The authorization server may have rotated the refresh token: the old one is dead,
                // and the new one exists only here until it is stored, so it is stored first.
                do {
                    try await saveRotated(token, for: key, grant: settings.grant, access: access)
                } catch {
                    if token.refreshToken != refresh { spent.insert(refresh) }
                    throw error
                }
                succeeded(key)
                events?.refreshed(.ok, destination: key.destination, ahead: ahead)
                await events?.record(.refreshed, key: key, grant: settings.grant, detail: nil)
                logger.info("token refreshed", metadata: ["token.key": .string(key.scopeKey), "destination": .string(key.destination)])
                return .token(token)
            case .invalidGrant:
                // The refresh token is dead: forget it and go for the grant.
                try await access.delete(key)
                events?.refreshed(.permanent, destination: key.destination, ahead: ahead)
                await events?.record(.refreshRejected, key: key, grant: settings.grant, detail: "invalid_grant")
                logger.info("refresh token rejected", metadata: ["oauth2.error": "invalid_grant", "destination": .string(key.destination)])
            case .refused(let error):
                throw await refreshFailed(key, grant: settings.grant, ahead: ahead, detail: error, OAuth2Error(
                    .refused, detail: "the authorization server refused Parley's refresh request (\(error)); the stored tokens are kept"))
            case .malformed(let reason):
                // A whole answer, from something that is not a token endpoint at work (a proxy's or
                // a maintenance page, a WAF): the refresh token did not reach a grant; it is kept.
                throw await refreshFailed(key, grant: settings.grant, ahead: ahead, detail: "malformed", OAuth2Error(.invalidResponse, detail: reason))
            case .uncertain(_, let reason):
                // The server may have rotated the refresh token and its answer is lost (a timeout, a
                // gateway's 504, a body that broke off): taken as spent and never sent again; as
                // after `invalid_grant`, the grant comes next (a new family).
                await forget(refresh, of: current, key: key, grant: settings.grant, access: access)
                events?.refreshed(.permanent, destination: key.destination, ahead: ahead)
                await events?.record(.refreshFailed, key: key, grant: settings.grant, detail: "outcome_unknown")
                logger.warning(
                    "a refresh's answer was lost; its refresh token is taken as spent",
                    metadata: ["destination": .string(key.destination), "reason": .string(reason)])
            case .transient(let retryAfter):
                throw await refreshFailed(key, grant: settings.grant, ahead: ahead, detail: "unavailable", OAuth2Error(
                    .temporarilyUnavailable, retryAfter: retryAfter, detail: "the authorization server is unavailable"))
            }
        }

        // A stale token of a grant Parley can repeat stays stored until the new one replaces it
        // in one write: deleting it first opened a window in which other instances saw no token.
        var parameters: [(String, String)]
        switch settings.grant {
        case .authorizationCode:
            if let current, refreshToken == nil || spent.contains(refreshToken ?? "") {
                // Nothing to renew it with: ahead of need it serves until it expires; for a call it is done.
                if ahead, isFresh(current) { return .token(current) }
                try await access.delete(key)
            }
            return .interactionRequired
        case .clientCredentials:
            parameters = [("grant_type", "client_credentials")]
            if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
        case .password:
            guard let credentials else {
                throw OAuth2Error(.refused, detail: "the password grant needs credentials, and the registration has none")
            }
            parameters = [("grant_type", "password"), ("username", credentials.username), ("password", credentials.password)]
            if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
        case .tokenExchange, .jwtBearer, .saml2Bearer:
            guard let propagation = settings.propagation else {
                throw OAuth2Error(.refused, detail: "the \(settings.grant.rawValue) grant has no propagation settings")
            }
            // A revocation after the identity was given: no grant speaks with it again.
            if let identity, let identityGate, try await !identityGate(identity) {
                throw OAuth2Error(
                    .identityTokenExpired,
                    detail: "the user's access was revoked after this identity token was issued; renew it with PUT /v1/registrations/me/identity and a token issued since")
            }
            parameters = try await PropagationGrant.parameters(
                propagation, grant: settings.grant, identity: identity, signer: signer, samlSigner: samlSigner, issuer: issuer,
                scopes: settings.scopes,
                now: clock.now)
        }
        try admitCall(key)
        switch await call(endpoint, parameters, report: report) {
        case .token(let token):
            try await access.save(token, for: key, grant: settings.grant)
            succeeded(key)
            await events?.record(.issued, key: key, grant: settings.grant, detail: nil)
            logger.info("token issued", metadata: ["oauth2.grant": .string(settings.grant.rawValue), "destination": .string(key.destination)])
            return .token(token)
        case .invalidGrant:
            throw OAuth2Error(.refused, detail: "the authorization server refused the \(settings.grant.rawValue) grant (invalid_grant)")
        case .refused(let error):
            throw OAuth2Error(.refused, detail: "the authorization server refused the \(settings.grant.rawValue) grant (\(error))")
        case .malformed(let reason):
            throw backOff(key, OAuth2Error(.invalidResponse, detail: reason))
        case .transient(let retryAfter), .uncertain(let retryAfter, _):
            throw backOff(key, OAuth2Error(.temporarilyUnavailable, retryAfter: retryAfter, detail: "the authorization server is unavailable"))
        }
    }

    /// A refresh whose outcome is unknown spent its refresh token as far as Parley can tell: the
    /// token is kept without it (the access token serves until it expires; then the password grant
    /// starts a new family, an authorization-code registration needs its person), and this process
    /// never sends it again even if that write fails.
    private func forget(_ refresh: String, of current: StoredToken, key: TokenKey, grant: OAuth2Settings.Grant, access: any TokenAccess) async {
        spent.insert(refresh)
        var kept = current
        kept.refreshToken = nil
        do {
            try await access.save(kept, for: key, grant: grant)
        } catch {
            logger.warning(
                "a refresh token taken as spent could not be dropped from the store; this instance will not send it again",
                metadata: ["destination": .string(key.destination), "error": "\(error)"])
        }
    }

    /// Stores a token obtained elsewhere (the authorization-code callback).
    public func store(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {
        try await store.exclusively(key) { access in try await access.save(token, for: key, grant: grant) }
        succeeded(key)
        await events?.record(.issued, key: key, grant: grant, detail: nil)
    }

    /// Stores a refreshed token, trying three times over about a second: a refresh token the
    /// authorization server rotated exists nowhere else, and losing it means replaying the retired
    /// one next time, which a server with reuse protection answers by revoking the whole family.
    private func saveRotated(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant, access: any TokenAccess) async throws {
        var pause = Duration.milliseconds(200)
        for attempt in 1...3 {
            do {
                try await access.save(token, for: key, grant: grant)
                return
            } catch {
                guard attempt < 3 else {
                    logger.error(
                        "a refreshed token could not be stored; if the authorization server rotated the refresh token, the next refresh may be refused",
                        metadata: ["destination": .string(key.destination), "error": "\(error)"])
                    throw error
                }
                try? await Task.sleep(for: pause)
                pause *= 3
            }
        }
    }

    /// Parley's own limit on token-endpoint calls per token owner (the registration, or the
    /// destination for its shared tokens); every stored token is kept.
    private func admitCall(_ key: TokenKey) throws {
        guard let wait = callGate?.admit(key) else { return }
        throw OAuth2Error(
            .rateLimited, retryAfter: wait, detail: "Parley limits how often it asks this destination's authorization server; try again later")
    }

    /// Within a back-off window the last failure is repeated without calling the server.
    private func checkBackoff(_ key: TokenKey) throws {
        let now = clock.now
        guard let gate = backoff.withLock({ $0[key] }), gate.until > now else { return }
        let wait = Duration.seconds(Int(gate.until.timeIntervalSince(now).rounded(.up)))
        throw OAuth2Error(gate.error.code, retryAfter: wait, detail: gate.error.detail + "; Parley waits before asking again")
    }

    /// A failed refresh that keeps every stored token: metrics, audit, back-off.
    private func refreshFailed(
        _ key: TokenKey, grant: OAuth2Settings.Grant, ahead: Bool, detail: String, _ error: OAuth2Error
    ) async -> OAuth2Error {
        events?.refreshed(.transient, destination: key.destination, ahead: ahead)
        await events?.record(.refreshFailed, key: key, grant: grant, detail: detail)
        let (backedOff, failures) = backOffCounting(key, error)
        if failures == refreshFailureReport {
            await events?.refreshKeepsFailing(key, grant: grant, failures: failures, detail: detail)
        }
        return backedOff
    }

    /// Closes the key for a while (at least `Retry-After`, exponential up to 60 s) and
    /// returns the error with the wait it ended up with.
    private func backOff(_ key: TokenKey, _ error: OAuth2Error) -> OAuth2Error { backOffCounting(key, error).error }

    /// `backOff`, and how many failures in a row the key has now.
    private func backOffCounting(_ key: TokenKey, _ error: OAuth2Error) -> (error: OAuth2Error, failures: Int) {
        let now = clock.now
        let (wait, failures) = backoff.withLock { state -> (Int64, Int) in
            // Bounded: at the ceiling, windows that closed an hour ago are forgotten (their
            // failure count would start again at one anyway, as after a success).
            if state[key] == nil, state.count >= Self.maxBackoffEntries {
                state = state.filter { $0.value.until.addingTimeInterval(3600) > now }
                if state.count >= Self.maxBackoffEntries, let oldest = state.min(by: { $0.value.until < $1.value.until }) {
                    state[oldest.key] = nil
                }
            }
            let failures = (state[key]?.failures ?? 0) + 1
            let exponential = Int64(min(60, 1 << min(failures - 1, 6)))
            let seconds = max(min(error.retryAfter?.components.seconds ?? 0, 3600), exponential)
            state[key] = (now.addingTimeInterval(TimeInterval(seconds)), failures, error)
            return (seconds, failures)
        }
        logger.warning(
            "token endpoint call failed; stored tokens kept",
            metadata: ["destination": .string(key.destination), "oauth2.failure": "\(error.code)", "retry.after.s": "\(wait)"])
        return (OAuth2Error(error.code, retryAfter: .seconds(wait), detail: error.detail), failures)
    }

    private func succeeded(_ key: TokenKey) {
        _ = backoff.withLock { $0.removeValue(forKey: key) }
    }
}

/// Digests of refresh tokens taken as spent, at most `capacity` (the oldest forgotten first: by
/// then the store no longer holds them, or another instance has replaced them).
final class SpentRefreshTokens: Sendable {
    static let capacity = 100_000
    private let state = Mutex<(digests: Set<[UInt8]>, order: [[UInt8]], next: Int)>(([], [], 0))

    func insert(_ token: String) {
        let digest = SHA256.hash(Array(token.utf8))
        state.withLock { state in
            guard state.digests.insert(digest).inserted else { return }
            if state.order.count < Self.capacity {
                state.order.append(digest)
            } else {
                state.digests.remove(state.order[state.next])
                state.order[state.next] = digest
                state.next = (state.next + 1) % Self.capacity
            }
        }
    }

    func contains(_ token: String) -> Bool {
        let digest = SHA256.hash(Array(token.utf8))
        return state.withLock { $0.digests.contains(digest) }
    }
}

/// Limits how often Parley calls a destination's token endpoint for the tokens of `key`'s
/// owner (its registration, or the destination when the tokens are shared): nil admits the
/// call, a duration is how long to wait. Keyed by owner, so that one registration spending
/// its budget leaves every other registration's refreshes alone.
public protocol TokenCallGate: Sendable {
    func admit(_ key: TokenKey) -> Duration?
}

/// Hears that a stored token was sent; must not block (the request path calls it).
public protocol TokenUsageSink: Sendable {
    func used(_ key: TokenKey, at: Date)
}
