import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import Synchronization
import ParleyDomain

/// `ANY /v1/proxy/{path…}`: the request goes through the registration's conversation
/// manager (`UpstreamExchange`); the final upstream response streams back with end-to-end
/// headers only. The path rules judge the raw request target, encoded segments included.
/// Admission (rate limit, failed-login lock, in-flight cap) happened before, in
/// `ProxyAdmission`; accounting (metrics, failed logins) is the conversation's observer.
struct ProxyController: Sendable {
    /// What the proxy forwards. `TRACE` and `CONNECT` are refused (405), as is any
    /// method not listed (WebDAV's, say); `MERGE` is OData's update.
    static let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete, .options, .init("MERGE")!]
    static let prefix = "/v1/proxy"

    let conversations: Conversations
    let flows: FlowService
    let exchange: UpstreamExchange
    /// The destinations' `stepUp` rules.
    var stepUp: StepUpGate? = nil
    /// `Prefer: wait=N`: a challenged call held until its sign-in completes.
    var signInWaits: SignInWaits? = nil

    @Sendable func forward(_ request: Request, context: ProxyRequestContext) async throws -> Response {
        let registration = context.registration
        let destination = context.destination
        let outgoing = try exchange.outgoing(request, prefix: Self.prefix, destination: destination)
        if let stepUp, !destination.stepUpRules.isEmpty { try await stepUp.check(outgoing, registration: registration, destination: destination) }
        let waitSeconds: Int? = signInWaits == nil ? nil : PreferWait.seconds(in: request.headers[values: .preferHeader])
        var afterSignIn: (@Sendable (InteractionRequest) async throws -> ConversationManager?)?
        if let waits = signInWaits, let seconds = waitSeconds {
            let conversations = self.conversations
            let flows = self.flows
            afterSignIn = { interaction in
                try await waits.signIn(interaction, seconds: seconds, registration: registration, flows: flows, conversations: conversations)
            }
        }
        let result: ConversationResult
        do {
            result = try await exchange.send(
                outgoing, body: request.body, declaredLength: request.headers[.contentLength].flatMap(Int64.init), limit: destination.requestBodyLimit,
                through: try conversations.manager(for: registration), afterSignIn: afterSignIn)
        } catch let error as OAuth2Error where error.code == .identityTokenExpired && registration.client != nil {
            // An agent's registration speaks with the agent's newest token (`AgentAccess`): the
            // conversation is built again from the registration, and the next call brings one.
            conversations.evict(registration.id)
            throw Problem(.unauthorized, .invalidIdentityToken, "the access token this registration speaks with has expired; call again with a fresh one")
        }
        switch result {
        case .interactionRequired(let interaction):
            var problem = Problem.from(try await flows.interactionRequired(interaction, registration: registration))
            if let waitSeconds { problem.headers[.preferenceApplied] = "wait=\(waitSeconds)" }
            throw problem
        case .response(let upstream):
            var response = try await UpstreamAnswer.response(
                from: upstream, csrf: destination.csrfEnabled, isHead: request.method == .head, ticket: context.inFlight)
            if let waitSeconds { response.headers[.preferenceApplied] = "wait=\(waitSeconds)" }
            return response
        }
    }
}

/// Who may send a proxied request now: the registration's rate limit, the failed-login lock
/// of a registration whose held credentials are checked upstream, and the cap on requests
/// in flight. What it decided (the destination, looked up here once, and the slot) travels in
/// the context (`ProxyRequestContext`) until the answer's body is written.
struct ProxyAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let conversations: Conversations
    let limits: RateLimits
    let inFlight: InFlightLimits

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // Without a registration the authenticator before this one has answered already.
        guard let registration = context.registration, registration.status != .pendingApproval else { return try await next(request, context) }
        try limits.check(limits.proxy, registration.idString, kind: "proxy")
        let destination = try conversations.destination(of: registration)
        if destination.checksHeldCredentials(registration) {
            try limits.checkLoginAllowed(LoginAttempt(registration: registration.id))
        }
        var context = context
        context.destination = destination
        context.inFlight = try inFlight.admit(key: registration.idString)
        return try await next(request, context)
    }
}

/// A destination's `stepUp` rules: a call one covers needs a sign-in at most `maxAgeSeconds`
/// old. The sign-in time is read from the database for such a call (never from a cache), so a
/// flow completed on any instance counts at once; other calls cost nothing.
struct StepUpGate: Sendable {
    let registrations: any RegistrationRepository
    let flows: FlowService
    let kinds: FlowKinds
    let clock: any WallClock

    /// Throws `401 interaction_required` with a `step_up` flow when a rule covers the call and
    /// the registration's last sign-in is older than it allows (or there was none).
    func check(_ outgoing: UpstreamExchange.Outgoing, registration: RegistrationRecord, destination: Destination) async throws {
        // The path as it goes upstream (decoded, checked and encoded again): what the rule judges.
        let path = outgoing.url.hasPrefix(destination.baseURL) ? String(outgoing.url.dropFirst(destination.baseURL.count)) : outgoing.url
        guard let rule = destination.stepUpRule(method: outgoing.method, path: path.isEmpty ? "/" : path) else { return }
        let current = try await registrations.find(id: registration.id) ?? registration
        if let signedIn = current.signedInAt {
            let age = clock.now.timeIntervalSince(signedIn)
            if age >= 0 && age <= rule.maxAge.timeInterval { return }
        }
        guard let kind = kinds.offered(by: destination).first else {
            throw Problem(.forbidden, .forbidden, "this call needs a fresh sign-in, and the destination offers none")
        }
        throw try await flows.stepUpRequired(kind: kind, scopeKey: kinds[kind]?.scopeKey(for: destination), rule: rule, registration: registration)
    }
}

/// `Prefer: wait=N` (RFC 7240 §4.3) on a proxied call: how long the client is willing to wait for
/// its answer, clamped to 60 s. Nil when the header does not ask for a wait (or asks for 0).
enum PreferWait {
    static let maxSeconds = 60

    static func seconds(in values: [String]) -> Int? {
        for value in values {
            for preference in value.split(separator: ",") {
                // `wait=10`, `wait="10"`, any case; parameters after `;` are not read.
                let token = preference.split(separator: ";", maxSplits: 1).first ?? ""
                let parts = token.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, parts[0].lowercased() == "wait" else { continue }
                var number = Substring(parts[1])
                if number.count >= 2, number.first == "\"", number.last == "\"" { number = number.dropFirst().dropLast() }
                guard !number.isEmpty, number.count <= 9, number.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let seconds = Int(number) else {
                    continue
                }
                return seconds > 0 ? min(seconds, maxSeconds) : nil
            }
        }
        return nil
    }
}

/// Calls held for their sign-in (`Prefer: wait=N`): the pending flow the challenge asks for is
/// waited on (woken by the flow signals, so a completion on any instance counts), and when it
/// completes within N seconds the call goes upstream again, through a conversation rebuilt from
/// what the sign-in stored. At most `perRegistration` calls of one registration and `perInstance`
/// in all wait at once; a call beyond either answers `401 interaction_required` at once, as
/// without the header. A call ends its wait after N seconds at the latest, its client gone or not.
final class SignInWaits: Sendable {
    let perRegistration: Int
    let perInstance: Int
    let invalidation: CacheInvalidation
    private let waiting = Mutex<(total: Int, byRegistration: [UUID: Int])>((0, [:]))

    init(perRegistration: Int = 4, perInstance: Int = 1000, invalidation: CacheInvalidation) {
        self.perRegistration = perRegistration
        self.perInstance = perInstance
        self.invalidation = invalidation
    }

    /// The manager to send the call through again once the sign-in completed; nil when it did
    /// not complete in time (or no wait slot was free).
    func signIn(
        _ interaction: InteractionRequest, seconds: Int, registration: RegistrationRecord, flows: FlowService, conversations: Conversations
    ) async throws -> ConversationManager? {
        guard admit(registration.id) else { return nil }
        defer { release(registration.id) }
        let flow = try await flows.pendingFlow(for: interaction, registration: registration)
        let view = try await flows.status(id: flow.id, wait: Double(seconds), registration: registration)
        guard view.status == FlowStatus.completed.rawValue else { return nil }
        // What the sign-in stored (tokens, cookies, perhaps on another instance) is read afresh.
        invalidation.apply(.registration(registration.id))
        invalidation.apply(.cookieJar(registration.id))
        return try conversations.manager(for: registration)
    }

    /// How many calls wait now (tests, metrics).
    var count: Int { waiting.withLock { $0.total } }

    private func admit(_ id: UUID) -> Bool {
        waiting.withLock { state in
            guard state.total < perInstance, state.byRegistration[id, default: 0] < perRegistration else { return false }
            state.total += 1
            state.byRegistration[id, default: 0] += 1
            return true
        }
    }

    private func release(_ id: UUID) {
        waiting.withLock { state in
            state.total -= 1
            let left = state.byRegistration[id, default: 1] - 1
            state.byRegistration[id] = left > 0 ? left : nil
        }
    }
}
