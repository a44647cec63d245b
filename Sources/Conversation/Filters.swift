/// The seed's three filter kinds, plus observers. Filters are stateless and
/// `Sendable`: everything about one conversation lives in its `Conversation`.

/// Runs before the request is sent. May edit the request, run side requests
/// through `conversation.manager`, or end the conversation.
public protocol RequestFilter: Sendable {
    func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision
}

public enum RequestDecision: Sendable {
    case proceed
    /// A person must act before the request can succeed.
    case interactionRequired(InteractionRequest)
}

/// Where credentials are asked for: scheme, realm and origin.
public struct ProtectionSpace: Sendable, Hashable {
    public enum Method: String, Sendable { case basic, bearer, negotiate, other }
    public let method: Method
    public let realm: String?
    public let origin: String

    public init(method: Method, realm: String?, origin: String) {
        self.method = method
        self.realm = realm
        self.origin = origin
    }

    var key: String { "\(method.rawValue)|\(realm ?? "")|\(origin)" }
}

/// An authentication challenge: a `401` with `WWW-Authenticate`.
public struct Challenge: Sendable {
    public let protectionSpace: ProtectionSpace
    /// How often credentials were already offered for this space in this conversation.
    public let previousFailureCount: Int
    public let request: UpstreamRequest
    public let status: Int
    public let headers: HeaderFields
}

public enum Credential: Sendable, Equatable {
    case basic(username: String, password: String)
    /// A ready header value, e.g. `Bearer …`.
    case authorization(String)
}

/// Answers a challenge. The first filter that produces credentials wins, and the
/// request restarts with them; "not mine" lets the next filter try.
public protocol ChallengeFilter: Sendable {
    func handle(_ challenge: Challenge, conversation: Conversation) async throws -> ChallengeDecision
}

public enum ChallengeDecision: Sendable {
    case notHandled
    case retry(with: Credential)
    case fail(any Error & Sendable)
    case interactionRequired(InteractionRequest)
}

/// Runs on every response before it is delivered. The response head is
/// read-only; a filter may only replace the body by an equivalent one (see
/// `UpstreamResponse.peekBody`), so it can look into HTML without losing it.
public protocol ResponseFilter: Sendable {
    func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
}

public enum ResponseDecision: Sendable {
    case deliver
    /// Send the request again (new token, new CSRF token, finished login).
    case restart(reason: RestartReason)
    case interactionRequired(InteractionRequest)
}

/// Why a conversation sends its request again. A closed set, so a metric label or a trace
/// attribute cannot be misspelt; `description` is the trace's wording, `label` the metric's.
public enum RestartReason: Sendable, Equatable, CustomStringConvertible {
    /// Credentials were offered for a `401` challenge of this scheme.
    case challenge(ProtectionSpace.Method)
    /// A fresh OAuth2 token replaces the one the upstream refused.
    case tokenRenewed
    /// The upstream asked for a CSRF token, and one was fetched.
    case csrfTokenRequired

    public var description: String {
        switch self {
        case .challenge(let method): "challenge \(method.rawValue)"
        case .tokenRenewed: "oauth2 token renewed"
        case .csrfTokenRequired: "csrf token required"
        }
    }

    /// The bounded metric label: `challenge`, `oauth2`, `csrf`.
    public var label: String {
        switch self {
        case .challenge: "challenge"
        case .tokenRenewed: "oauth2"
        case .csrfTokenRequired: "csrf"
        }
    }
}

/// A person has to complete a flow before the conversation can go on.
public struct InteractionRequest: Sendable, Equatable {
    /// Which kind of flow can help. Open-ended: the filters that ask for a person name their
    /// kinds, and the server hosts each kind in a file of its own; the engine knows none.
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
    }
    public let kind: Kind
    /// The storage URL the flow's result belongs to (OAuth2), if any.
    public let scopeKey: String?
    /// The upstream URL that met the challenge.
    public let url: String

    public init(kind: Kind, scopeKey: String? = nil, url: String) {
        self.kind = kind
        self.scopeKey = scopeKey
        self.url = url
    }
}

/// Watches a conversation without changing it (metrics, logs, audit).
public protocol ConversationObserver: Sendable {
    func observe(_ event: ConversationEvent, conversation: Conversation)
}

public enum ConversationEvent: Sendable {
    case sending(method: String, url: String, attempt: Int)
    case received(status: Int, url: String)
    case restarting(reason: RestartReason)
    /// The final answer (`status`), or nil when a person must act.
    case finished(status: Int?)
    /// The conversation ended with an error (transport, a filter's failure, too many restarts).
    case failed(any Error)
}
