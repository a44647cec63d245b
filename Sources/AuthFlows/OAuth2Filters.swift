public import Conversation
import Synchronization

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

/// Everything the OAuth2 filters of one registration share.
/// A class: the request and response filters of one manager share it (one allocation per
/// registration, where a struct was copied into a box for each).
public final class OAuth2Participant: Sendable {
    public let broker: OAuth2Broker
    public let endpoint: TokenEndpointClient
    public let registrationID: String
    public let credentials: UserCredentials?
    /// The verified user a propagation grant speaks for.
    public var identity: PropagatedIdentity? { verified?.identity }
    /// Boxed: most registrations have none, and an identity is wider than the rest of this object.
    private let verified: Verified?

    private final class Verified: Sendable {
        let identity: PropagatedIdentity
        init(_ identity: PropagatedIdentity) { self.identity = identity }
    }

    public init(
        broker: OAuth2Broker, endpoint: TokenEndpointClient, registrationID: String, credentials: UserCredentials?,
        identity: PropagatedIdentity? = nil
    ) {
        self.broker = broker
        self.endpoint = endpoint
        self.registrationID = registrationID
        self.credentials = credentials
        self.verified = identity.map(Verified.init)
    }

    var settings: OAuth2Settings { endpoint.settings }

    /// The key of the last request: most of a registration's requests have one scope key, and
    /// its key (and the key's text, a token cache's key) is then made once, not per request.
    private let lastKey = Mutex<TokenKey?>(nil)

    func key(for url: String) -> TokenKey {
        let scopeKey = settings.scopeKey(for: url)
        if let last = lastKey.withLock({ $0 }), last.scopeKey == scopeKey { return last }
        let key = TokenKey(
            destination: settings.destination, registrationID: settings.tokensBelongToDestination ? nil : registrationID, scopeKey: scopeKey)
        lastKey.withLock { $0 = key }
        return key
    }

    func obtain(_ key: TokenKey, stale: StoredToken?) async throws -> TokenOutcome {
        try await broker.obtain(key, endpoint: endpoint, credentials: credentials, identity: identity, stale: stale)
    }
}

/// Attaches the stored access token for the request's scope key. A token known to
/// be stale is renewed first, never sent; with no token the request goes out
/// without one and the challenge decides (reactive, as the seeds).
public struct OAuth2RequestFilter: RequestFilter {
    let participant: OAuth2Participant

    public init(_ participant: OAuth2Participant) { self.participant = participant }

    public func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
        let key = participant.key(for: request.url)
        guard var token = try await participant.broker.stored(key) else { return .proceed }
        if !participant.broker.isFresh(token) {
            switch try await participant.obtain(key, stale: token) {
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
        let key = participant.key(for: request.url)
        guard !conversation.renewed(key) else { return .deliver }
        conversation[OAuth2Attempts.self] = attempts + 1
        switch try await participant.obtain(key, stale: conversation[OAuth2UsedToken.self]) {
        case .token:
            conversation.noteRenewed(key)
            return .restart(reason: .tokenRenewed)
        case .interactionRequired:
            return .interactionRequired(InteractionRequest(kind: .oauth2, scopeKey: key.scopeKey, url: request.url))
        }
    }
}
