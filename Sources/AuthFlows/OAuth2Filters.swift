public import Conversation

private enum OAuth2UsedToken: ConversationContextKey { typealias Value = StoredToken }
private enum OAuth2Attempts: ConversationContextKey { typealias Value = Int }
/// The token keys whose token this conversation obtained or renewed itself.
private enum OAuth2Renewed: ConversationContextKey { typealias Value = Set<TokenKey> }

extension Conversation {
    /// Notes that the token for `key` was obtained in this conversation.
    fileprivate func noteRenewed(_ key: TokenKey) {
        self[OAuth2Renewed.self] = (self[OAuth2Renewed.self] ?? []).union([key])
    }

    fileprivate func renewed(_ key: TokenKey) -> Bool { self[OAuth2Renewed.self]?.contains(key) ?? false }
}

/// What the OAuth2 filters of a destination share: one object for every registration of it.
/// The registration a call is for is the conversation's party (`RegistrationParty`).
public final class OAuth2Participant: Sendable {
    public let broker: OAuth2Broker
    public let endpoint: TokenEndpointClient

    public init(broker: OAuth2Broker, endpoint: TokenEndpointClient) {
        self.broker = broker
        self.endpoint = endpoint
    }

    var settings: OAuth2Settings { endpoint.settings }

    /// The token key of a request to `url` (strings the settings and the party hold: no
    /// allocation); nil when the destination's tokens are its registrations' and the
    /// conversation has none.
    func key(for url: String, party: (any ConversationParty)?) -> TokenKey? {
        let registrationID: String?
        if settings.tokensBelongToDestination {
            registrationID = nil
        } else {
            guard let party else { return nil }
            registrationID = party.id
        }
        return TokenKey(destination: settings.destination, registrationID: registrationID, scopeKey: settings.scopeKey(for: url))
    }

    func obtain(_ key: TokenKey, stale: StoredToken?, party: (any ConversationParty)?) async throws -> TokenOutcome {
        let registration = party as? RegistrationParty
        return try await broker.obtain(
            key, endpoint: endpoint, credentials: registration?.credentials, identity: registration?.identity, stale: stale)
    }
}

/// Attaches the stored access token for the request's scope key. A token known to
/// be stale is renewed first, never sent; with no token the request goes out
/// without one and the challenge decides (reactive, as the seeds).
public struct OAuth2RequestFilter: RequestFilter {
    let participant: OAuth2Participant

    public init(_ participant: OAuth2Participant) { self.participant = participant }

    public func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
        guard let key = participant.key(for: request.url, party: conversation.party),
            var token = try await participant.broker.stored(key)
        else { return .proceed }
        if !participant.broker.isFresh(token) {
            switch try await participant.obtain(key, stale: token, party: conversation.party) {
            case .token(let fresh):
                token = fresh
                conversation.noteRenewed(key)
            case .interactionRequired:
                return .interactionRequired(InteractionRequest(kind: .oauth2, scopeKey: key.scopeKey, url: request.url))
            }
        }
        conversation[OAuth2UsedToken.self] = token
        participant.broker.noteUse(key)
        request.headers.set("Authorization", "Bearer " + token.accessToken)
        return .proceed
    }
}

/// Recognises an OAuth2 challenge and renews: a token stored meanwhile, the refresh
/// token, then the grant. A challenge to a token this conversation has just obtained is
/// handed on as it came (the server refuses even a fresh token: renewing again would only
/// spend the token endpoint); at most two renewals per conversation in any case, so a
/// server that refuses every token cannot loop.
public struct OAuth2ResponseFilter: ResponseFilter {
    let participant: OAuth2Participant

    public init(_ participant: OAuth2Participant) { self.participant = participant }

    public func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        guard participant.settings.isChallenge(response) else { return .deliver }
        let attempts = conversation[OAuth2Attempts.self] ?? 0
        guard attempts < 2 else { return .deliver }
        guard let key = participant.key(for: request.url, party: conversation.party), !conversation.renewed(key) else { return .deliver }
        conversation[OAuth2Attempts.self] = attempts + 1
        switch try await participant.obtain(key, stale: conversation[OAuth2UsedToken.self], party: conversation.party) {
        case .token:
            conversation.noteRenewed(key)
            return .restart(reason: .tokenRenewed)
        case .interactionRequired:
            return .interactionRequired(InteractionRequest(kind: .oauth2, scopeKey: key.scopeKey, url: request.url))
        }
    }
}
