package import Foundation

/// Failed sign-ins, with credentials Parley holds or a person typed on the Basic form: checked
/// before a try and counted after a failure. The edge's rate limits keep the counts
/// (`PARLEY_RATE_LIMIT_FAILED_LOGINS`).
package protocol LoginLimiter: Sendable {
    /// Refused while any of the attempt's keys has failed too often.
    func checkLoginAllowed(_ attempt: LoginAttempt) throws(RateLimited)
    func recordFailedLogin(_ attempt: LoginAttempt)
}

/// Too many tries: wait `retryAfter` (`429 rate_limited` with `Retry-After`, at the edge).
package struct RateLimited: Error, Sendable, Equatable {
    package let retryAfter: Duration
    /// What was tried too often, for the client; no secret.
    package let detail: String

    package init(retryAfter: Duration, detail: String) {
        self.retryAfter = retryAfter
        self.detail = detail
    }
}

/// What a failed sign-in is counted against: the registration that tried, and, where known,
/// what was really tried (the upstream username, or the verified user) from which client
/// address. Never the `userHint` a client chose: a victim's registrations cannot be locked out
/// by somebody else's failures under their name.
package struct LoginAttempt: Sendable, Equatable {
    package let registration: UUID
    package var tried: String?
    package var client: String?

    package var keys: [String] {
        var keys = ["r:" + registration.uuidString]
        if let tried, let client { keys.append("u:" + tried.lowercased() + "|" + client) }
        return keys
    }

    package init(registration: UUID, tried: String? = nil, client: String? = nil) {
        self.registration = registration
        self.tried = tried
        self.client = client
    }
}
