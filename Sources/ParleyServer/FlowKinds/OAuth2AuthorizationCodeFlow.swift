import AuthFlows
import Conversation
import Foundation
import Logging
import ParleyCrypto
import ParleyEncoding

/// OAuth2 authorization code with PKCE (S256) and `state`. The start page mints the
/// state (hashed) and verifier (sealed) and redirects to the authorization endpoint;
/// `/callback/oauth2` claims the flow by its state exactly once, exchanges the code
/// and stores the tokens.
struct OAuth2AuthorizationCodeFlow: FlowKindHandler {
    /// What the flow keeps between its start page and the callback (sealed in the row).
    struct State: Codable, Sendable { var pkceVerifier: String }

    let kind: FlowKind = .oauth2
    let flows: any FlowRepository
    let lifecycle: FlowService
    let registrations: any RegistrationRepository
    let conversations: Conversations
    let broker: OAuth2Broker
    let state: FlowKindState<State>
    let clock: any WallClock
    let publicURL: String

    init(_ environment: FlowKindEnvironment, broker: OAuth2Broker) {
        flows = environment.flows.flows
        lifecycle = environment.flows
        registrations = environment.registrations
        conversations = environment.conversations
        self.broker = broker
        state = environment.state(State.self)
        clock = environment.clock
        publicURL = environment.publicURL
    }

    var redirectURI: String { publicURL + "/callback/oauth2" }

    func isOffered(by destination: Destination) -> Bool { destination.oauth2?.grant == .authorizationCode }

    func scopeKey(for destination: Destination) -> String? { destination.oauth2?.defaultScopeKey }

    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard let settings = destination.oauth2, settings.grant == .authorizationCode, let endpoint = settings.authorizationEndpoint else {
            return .failure(.notFound("this flow cannot be started here"))
        }
        // Each opening of the start page mints a new `state` (the flow is filed under its hash)
        // and PKCE verifier; the last one opened is the one the callback accepts.
        let callbackState = SecureRandom.token(byteCount: 32)
        let verifier = PKCE.verifier()
        guard
            try await state.update(flow, callbackHash: SHA256.hash(Array(callbackState.utf8)), { $0 = State(pkceVerifier: verifier) }) != nil
        else {
            return lifecycle.done(flow)
        }
        var parameters = [
            ("response_type", "code"), ("client_id", settings.clientID), ("redirect_uri", redirectURI), ("state", callbackState),
            ("code_challenge", PKCE.challenge(for: verifier)), ("code_challenge_method", "S256"),
        ]
        if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
        let separator = endpoint.contains("?") ? "&" : "?"
        return .redirect(endpoint + separator + PercentEncoding.encodeForm(parameters), status: .found)
    }

    func routes(_ kinds: FlowKinds) -> [FlowRoute] {
        [
            FlowRoute(path: "/callback/oauth2", methods: [.get]) { input, logger in try await callback(input, logger: logger) }
        ]
    }

    /// `GET /callback/oauth2`: the `state` claims its flow exactly once; the code is
    /// exchanged with the PKCE verifier; the tokens are stored; the flow completes.
    func callback(_ input: FlowInput, logger: Logger) async throws -> FlowPage {
        func value(_ name: String) -> String? { input.value(name) }
        guard let state = value("state"), !state.isEmpty, state.utf8.count <= 256,
            let flow = try await flows.claim(callbackHash: SHA256.hash(Array(state.utf8)))
        else {
            logger.info("oauth2 callback refused: unknown or used state")
            return .failure(.invalid("this sign-in answer is not valid, or it was used already"))
        }
        if flow.expiresAt <= clock.now {
            try await lifecycle.finish(flow, status: .expired, error: nil, logger: logger)
            return .failure(Problem(.gone, .flowExpired, "this sign-in took too long; start again in the app"))
        }
        let done = lifecycle.done(flow)
        if let error = value("error") {
            try await lifecycle.finish(flow, status: .failed, error: TokenEndpointClient.safeErrorCode(error), logger: logger)
            return done
        }
        guard let code = value("code"), !code.isEmpty, let verifier = try self.state.read(flow)?.pkceVerifier,
            let registration = try await registrations.find(id: flow.registrationID),
            let destination = try? conversations.destination(of: registration),
            let endpoint = conversations.tokenEndpoint(for: destination)
        else {
            try await lifecycle.finish(flow, status: .failed, error: "invalid_callback", logger: logger)
            return done
        }
        let outcome = await endpoint.request([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier),
        ])
        switch outcome {
        case .token(let token):
            let key = TokenKey(
                destination: destination.name, registrationID: registration.idString,
                scopeKey: flow.scopeKey ?? endpoint.settings.defaultScopeKey)
            try await broker.store(token, for: key, grant: .authorizationCode)
            try await lifecycle.finish(flow, status: .completed, error: nil, logger: logger)
        case .invalidGrant:
            try await lifecycle.finish(flow, status: .failed, error: "invalid_grant", logger: logger)
        case .refused(let error):
            try await lifecycle.finish(flow, status: .failed, error: error, logger: logger)
        case .malformed:
            try await lifecycle.finish(flow, status: .failed, error: "invalid_token_response", logger: logger)
        case .transient:
            try await lifecycle.finish(flow, status: .failed, error: "temporarily_unavailable", logger: logger)
        }
        return done
    }
}
