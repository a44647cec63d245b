public import Conversation

/// Username and password a registration brought (Basic, OAuth2 password grant).
public struct UserCredentials: Sendable, Equatable, Codable {
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }
}

/// Answers `Basic` challenges with the registration's credentials, once per
/// conversation and protection space (the seed's `previousFailureCount == 0` rule).
/// When they fail, the upstream's `401` is delivered as it is.
public struct BasicChallengeFilter: ChallengeFilter {
    /// Nil: the conversation's party's (one filter then serves every registration of a destination).
    let credentials: UserCredentials?

    public init(credentials: UserCredentials? = nil) { self.credentials = credentials }

    public func handle(_ challenge: Challenge, conversation: Conversation) async throws -> ChallengeDecision {
        guard challenge.protectionSpace.method == .basic, challenge.previousFailureCount == 0,
            let credentials = credentials ?? (conversation.party as? RegistrationParty)?.credentials
        else { return .notHandled }
        return .retry(with: .basic(username: credentials.username, password: credentials.password))
    }
}
