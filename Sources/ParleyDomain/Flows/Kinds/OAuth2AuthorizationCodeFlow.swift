package import AuthFlows
package import Conversation
package import Foundation
package import Logging
import ParleyCrypto
import ParleyEncoding

/// OAuth2 authorization code with PKCE (S256) and `state`. The start page mints the
/// state (hashed) and verifier (sealed) and redirects to the authorization endpoint;
/// `/callback/oauth2` claims the flow by its state exactly once, exchanges the code,
/// learns who signed in (the `id_token`, else userinfo, where the destination says how),
/// and stores the tokens only when that is the registration's user.
package struct OAuth2AuthorizationCodeFlow: FlowKindHandler {
    /// What the flow keeps between its start page and the callback (sealed in the row): the PKCE
    /// verifier, and the OpenID Connect `nonce` the `id_token` must echo (when `openid` is asked for).
    package struct State: Codable, Sendable {
        package var pkceVerifier: String
        package var nonce: String?
    }

    /// The flow error of a sign-in whose `id_token` is missing or fails a check (signature, `iss`,
    /// `aud`, time, `nonce`) at a destination with `oauth2.jwksUri`.
    package static let invalidIDToken = "invalid_id_token"
    /// The flow error of an authorization response whose `iss` (RFC 9207) is not the destination's
    /// `oauth2.issuer`: an answer of another authorization server (a mix-up); its code is never exchanged.
    package static let issuerMismatch = "issuer_mismatch"
    /// The flow error of a sign-in whose userinfo answer names nobody.
    package static let invalidUserinfo = "invalid_userinfo"

    package let kind: FlowKind = .oauth2
    package let flows: any FlowRepository
    package let lifecycle: FlowService
    package let registrations: any RegistrationRepository
    package let conversations: Conversations
    package let broker: OAuth2Broker
    package let state: FlowKindState<State>
    package let clock: any WallClock
    package let publicURL: String
    /// Per destination with `oauth2.jwksUri`: the verifier of its `id_token`s (its issuer, its
    /// keys, `aud` = its client id), made once, over Parley's transport and clock.
    package let idTokenVerifiers: [String: IdentityTokenVerifier]

    package init(_ environment: FlowKindEnvironment, broker: OAuth2Broker, logger: Logger) {
        flows = environment.flows.flows
        lifecycle = environment.flows
        registrations = environment.registrations
        conversations = environment.conversations
        self.broker = broker
        state = environment.state(State.self)
        clock = environment.clock
        publicURL = environment.publicURL
        var verifiers: [String: IdentityTokenVerifier] = [:]
        for destination in environment.conversations.destinations.values {
            guard let settings = destination.oauth2, settings.grant == .authorizationCode, let jwksURI = settings.jwksURI,
                let issuer = settings.issuer
            else { continue }
            verifiers[destination.name] = IdentityTokenVerifier(
                providers: [IdentityProvider(issuer: issuer, jwksURI: jwksURI, audiences: [settings.clientID])],
                transport: environment.conversations.configurator.transport, clock: environment.clock, logger: logger)
        }
        idTokenVerifiers = verifiers
    }

    package var redirectURI: String { publicURL + "/callback/oauth2" }

    package func isOffered(by destination: Destination) -> Bool { destination.oauth2?.grant == .authorizationCode }

    package func yieldsIdentity(for destination: Destination) -> Bool { destination.oauth2?.yieldsIdentity == true }

    package func scopeKey(for destination: Destination) -> String? { destination.oauth2?.defaultScopeKey }

    package func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard let settings = destination.oauth2, settings.grant == .authorizationCode, let endpoint = settings.authorizationEndpoint else {
            return .notice(.cannotStart)
        }
        // Each opening of the start page mints a new `state` (the flow is filed under its hash)
        // and PKCE verifier; the last one opened is the one the callback accepts.
        let callbackState = SecureRandom.token(byteCount: 32)
        let verifier = PKCE.verifier()
        // OpenID Connect: a fresh nonce per opening, which the `id_token` must carry back.
        let nonce = settings.scopes.contains("openid") ? SecureRandom.token(byteCount: 32) : nil
        guard
            try await state.update(
                flow, callbackHash: SHA256.hash(Array(callbackState.utf8)), { $0 = State(pkceVerifier: verifier, nonce: nonce) }) != nil
        else {
            return lifecycle.done(flow)
        }
        var parameters = [
            ("response_type", "code"), ("client_id", settings.clientID), ("redirect_uri", redirectURI), ("state", callbackState),
            ("code_challenge", PKCE.challenge(for: verifier)), ("code_challenge_method", "S256"),
        ]
        if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
        if let nonce { parameters.append(("nonce", nonce)) }
        // Without a verified user, a session at the authorization server must not sign in unseen;
        // nor with one whose sign-ins this destination cannot name (the binding cannot check them).
        let checked = registration.hasVerifiedUser && yieldsIdentity(for: destination)
        if flow.purpose == .stepUp {
            // A step-up asks for a sign-in now, whatever session the server holds (OpenID Connect
            // `prompt=login`, and `max_age=0` for servers that read only that).
            parameters += [("prompt", "login"), ("max_age", "0")]
        } else if let prompt = settings.prompt.value(verifiedUser: checked) {
            parameters.append(("prompt", prompt))
        }
        let separator = endpoint.contains("?") ? "&" : "?"
        return .redirect(endpoint + separator + PercentEncoding.encodeForm(parameters), status: .found)
    }

    package func routes(_ kinds: FlowKinds) -> [FlowRoute] {
        [
            FlowRoute(path: "/callback/oauth2", methods: [.get]) { input, logger in try await callback(input, logger: logger) }
        ]
    }

    /// `GET /callback/oauth2`: the `state` claims its flow exactly once; the code is
    /// exchanged with the PKCE verifier; who signed in is judged against the registration's
    /// user; only then are the tokens stored and the flow completed.
    package func callback(_ input: FlowInput, logger: Logger) async throws -> FlowPage {
        func value(_ name: String) -> String? { input.value(name) }
        guard let state = value("state"), !state.isEmpty, state.utf8.count <= 256,
            let flow = try await flows.claim(callbackHash: SHA256.hash(Array(state.utf8)))
        else {
            logger.info("oauth2 callback refused: unknown or used state")
            return .notice(.answerNotValid)
        }
        if flow.expiresAt <= clock.now {
            try await lifecycle.finish(flow, status: .expired, error: nil, logger: logger)
            return .notice(.expired)
        }
        let done = lifecycle.done(flow)
        // RFC 9207 (mix-up defence): an authorization response that names its issuer must name
        // this destination's `oauth2.issuer`, errors included; one from another server ends the
        // flow before its code reaches any token endpoint. Without `oauth2.issuer` there is
        // nothing to compare with, and an absent `iss` passes (docs/decisions.md).
        let issuers = input.fields.filter { $0.0 == "iss" }.map(\.1)
        if !issuers.isEmpty {
            let registration = try await registrations.find(id: flow.registrationID)
            let expected = registration.flatMap { try? conversations.destination(of: $0) }?.oauth2?.issuer
            if let expected, issuers.count > 1 || !constantTimeEquals(Array(issuers[0].utf8), Array(expected.utf8)) {
                logger.warning(
                    "oauth2 sign-in refused: the authorization response names another issuer", metadata: ["flow.id": .string(flow.idString)])
                try await lifecycle.finish(flow, status: .failed, error: Self.issuerMismatch, logger: logger)
                return done
            }
        }
        if let error = value("error") {
            try await lifecycle.finish(flow, status: .failed, error: TokenEndpointClient.safeErrorCode(error), logger: logger)
            return done
        }
        guard let code = value("code"), !code.isEmpty, let kept = try self.state.read(flow),
            let registration = try await registrations.find(id: flow.registrationID),
            let destination = try? conversations.destination(of: registration),
            let endpoint = conversations.tokenEndpoint(for: destination)
        else {
            try await lifecycle.finish(flow, status: .failed, error: "invalid_callback", logger: logger)
            return done
        }
        let outcome = await endpoint.request([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", kept.pkceVerifier),
        ])
        switch outcome {
        case .token(var token):
            // Who signed in, before anything of this sign-in is kept.
            let idToken = token.idToken
            token.idToken = nil
            switch await signedIn(idToken: idToken, accessToken: token.accessToken, nonce: kept.nonce, destination: destination, endpoint: endpoint, logger: logger) {
            case .unknown:
                guard try await lifecycle.admitUnknown(flow, logger: logger) else {
                    await discard(token, endpoint: endpoint)
                    return done
                }
            case .identity(let identity, let authTime):
                // A step-up asked for a sign-in now: the id_token must say the person authenticated
                // after the flow began (`auth_time`), not that a session from before was reused.
                if flow.purpose == .stepUp, !Self.isFresh(authTime: authTime, flowCreatedAt: flow.createdAt) {
                    logger.warning("oauth2 step-up refused: the sign-in is older than the flow", metadata: ["flow.id": .string(flow.idString)])
                    try await lifecycle.finish(flow, status: .failed, error: Self.staleSignIn, logger: logger)
                    await discard(token, endpoint: endpoint)
                    return done
                }
                guard try await lifecycle.admit(flow, signedIn: identity, logger: logger) else {
                    await discard(token, endpoint: endpoint)
                    return done
                }
            case .refused(let error):
                try await lifecycle.finish(flow, status: .failed, error: error, logger: logger)
                await discard(token, endpoint: endpoint)
                return done
            }
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
        case .transient, .uncertain:
            try await lifecycle.finish(flow, status: .failed, error: "temporarily_unavailable", logger: logger)
        }
        return done
    }

    /// The flow error of a step-up sign-in whose `id_token` does not show an authentication after
    /// the flow began (`auth_time` older, or absent).
    package static let staleSignIn = "stale_sign_in"
    /// How far before the flow's start an `auth_time` may lie (clocks of two machines).
    package static let authTimeTolerance: TimeInterval = 30

    /// Whether `auth_time` shows an authentication after the flow began (within the tolerance).
    package static func isFresh(authTime: Date?, flowCreatedAt: Date) -> Bool {
        guard let authTime else { return false }
        return authTime.timeIntervalSince(flowCreatedAt) >= -authTimeTolerance
    }

    /// Who a sign-in was, as the destination can tell.
    package enum SignIn: Sendable, Equatable {
        /// The destination reads no identity (neither `jwksUri` nor `userinfoEndpoint`).
        case unknown
        /// Who signed in, and when they authenticated (`auth_time` of an `id_token`; nil from userinfo).
        case identity(SignedInIdentity, authTime: Date?)
        /// The destination reads one, and this sign-in did not show a valid one: the flow fails with this error.
        case refused(String)
    }

    /// The signed-in identity: the `id_token`'s `sub` where the destination has `jwksUri` (checked
    /// against its keys, `iss` = `oauth2.issuer`, `aud` = `clientId`, time, and the flow's nonce),
    /// else the `sub` userinfo names for the new access token. Neither token is ever logged.
    package func signedIn(
        idToken: String?, accessToken: String, nonce: String?, destination: Destination, endpoint: TokenEndpointClient, logger: Logger
    ) async -> SignIn {
        let settings = endpoint.settings
        let metadata: Logger.Metadata = ["destination": .string(destination.name)]
        if settings.jwksURI != nil {
            guard let verifier = idTokenVerifiers[destination.name], let idToken else {
                logger.warning("oauth2 sign-in refused: the token response has no id_token", metadata: metadata)
                return .refused(Self.invalidIDToken)
            }
            let verified: VerifiedIdentity
            do {
                verified = try await verifier.verify(idToken)
            } catch {
                logger.warning(
                    "oauth2 sign-in refused: the id_token failed a check",
                    metadata: metadata.merging(["identity.check": .string(error.check.rawValue)]) { $1 })
                return .refused(Self.invalidIDToken)
            }
            // OIDC Core §3.1.3.7: the nonce of this flow's authorization request, and no other.
            guard let nonce, let echoed = verified.claims["nonce"], constantTimeEquals(Array(echoed.utf8), Array(nonce.utf8)) else {
                logger.warning(
                    "oauth2 sign-in refused: the id_token failed a check", metadata: metadata.merging(["identity.check": "nonce"]) { $1 })
                return .refused(Self.invalidIDToken)
            }
            return .identity(SignedInIdentity(issuer: verified.issuer, subject: verified.subject), authTime: verified.authTime)
        }
        if settings.userinfoEndpoint != nil {
            switch await endpoint.userinfo(accessToken: accessToken) {
            case .subject(let subject):
                return .identity(SignedInIdentity(issuer: settings.identityIssuer, subject: subject), authTime: nil)
            case .malformed(let reason):
                logger.warning("oauth2 sign-in refused: userinfo names nobody", metadata: metadata.merging(["error": .string(reason)]) { $1 })
                return .refused(Self.invalidUserinfo)
            case .transient:
                logger.warning("oauth2 sign-in refused: the userinfo endpoint is unavailable", metadata: metadata)
                return .refused("temporarily_unavailable")
            }
        }
        return .unknown
    }

    /// Tokens of a sign-in that is not kept: revoked at the authorization server when the
    /// destination names a revocation endpoint (the refresh token first, which ends its grant),
    /// and forgotten.
    package func discard(_ token: StoredToken, endpoint: TokenEndpointClient) async {
        guard endpoint.settings.revocationEndpoint != nil else { return }
        if let refresh = token.refreshToken { _ = await endpoint.revoke(refresh, hint: "refresh_token") }
        _ = await endpoint.revoke(token.accessToken, hint: "access_token")
    }
}
