import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird

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

    @Sendable func forward(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let registration = try context.approvedRegistration()
        let destination = try conversations.destination(of: registration)
        let outgoing = try exchange.outgoing(request, prefix: Self.prefix, destination: destination)
        if let stepUp, !destination.stepUpRules.isEmpty { try await stepUp.check(outgoing, registration: registration, destination: destination) }
        let result: ConversationResult
        do {
            result = try await exchange.send(
                outgoing, body: request.body, declaredLength: request.headers[.contentLength].flatMap(Int64.init), limit: destination.requestBodyLimit,
                through: try conversations.manager(for: registration))
        } catch let error as OAuth2Error where error.code == .identityTokenExpired && registration.client != nil {
            // An agent's registration speaks with the agent's newest token (`AgentAccess`): the
            // conversation is built again from the registration, and the next call brings one.
            conversations.evict(registration.id)
            throw Problem(.unauthorized, .invalidIdentityToken, "the access token this registration speaks with has expired; call again with a fresh one")
        }
        switch result {
        case .interactionRequired(let interaction):
            throw try await flows.interactionRequired(interaction, registration: registration)
        case .response(let upstream):
            return try await UpstreamAnswer.response(
                from: upstream, csrf: destination.csrfEnabled, isHead: request.method == .head, ticket: context.inFlight)
        }
    }
}

/// Who may send a proxied request now: the registration's rate limit, the failed-login lock
/// of a registration whose held credentials are checked upstream, and the cap on requests
/// in flight (its slot travels in the context until the answer's body is written).
struct ProxyAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let conversations: Conversations
    let limits: RateLimits
    let inFlight: InFlightLimits

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // Without a registration the authenticator before this one has answered already.
        guard let registration = context.registration, registration.status != .pendingApproval else { return try await next(request, context) }
        try limits.check(limits.proxy, registration.idString, kind: "proxy")
        if let destination = try? conversations.destination(of: registration), destination.checksHeldCredentials(registration) {
            try limits.checkLoginAllowed(LoginAttempt(registration: registration.id))
        }
        var context = context
        context.inFlight = try inFlight.admit(registration.id)
        return try await next(request, context)
    }
}

extension Destination {
    /// Whether a proxied call of `registration` tries credentials Parley holds for it upstream
    /// (the password grant, or Basic with stored credentials): their failures count as failed logins.
    func checksHeldCredentials(_ registration: RegistrationRecord) -> Bool {
        oauth2?.grant == .password || (basic != nil && registration.credentialsSealed != nil)
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
            let allowed = Double(rule.maxAge.components.seconds) + Double(rule.maxAge.components.attoseconds) / 1e18
            if age >= 0 && age <= allowed { return }
        }
        guard let kind = kinds.offered(by: destination).first else {
            throw Problem(.forbidden, .forbidden, "this call needs a fresh sign-in, and the destination offers none")
        }
        throw try await flows.stepUpRequired(kind: kind, scopeKey: kinds[kind]?.scopeKey(for: destination), rule: rule, registration: registration)
    }
}
