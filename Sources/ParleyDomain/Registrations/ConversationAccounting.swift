package import AuthFlows
package import Conversation
package import Foundation

/// What a registration's proxied conversations count, watched from the conversation itself
/// rather than from a controller: final answers and errors by destination, the upstream's
/// latency, and failed logins of credentials Parley holds (the failed-login limiter). Side
/// requests (a CSRF token fetch) belong to the conversation that needed them and are not
/// counted on their own.
package struct ConversationAccounting: ConversationObserver {
    /// What the registrations of one destination share (one per destination and kind of
    /// registration): the observer itself is shared by their managers, and the registration a
    /// conversation counts for is its party.
    package final class Shared: Sendable {
        let destination: String
        /// A `401` counts as a failed login: Basic with credentials Parley holds.
        let countsUnauthorized: Bool
        let limits: any LoginLimiter
        let metrics: Metrics
        let errorNames: ErrorNames

        init(destination: String, countsUnauthorized: Bool, limits: any LoginLimiter, metrics: Metrics, errorNames: ErrorNames) {
            self.destination = destination
            self.countsUnauthorized = countsUnauthorized
            self.limits = limits
            self.metrics = metrics
            self.errorNames = errorNames
        }
    }

    /// Builds the observers of each destination's registrations once.
    package struct Factory: Sendable {
        private let shared: [String: (holding: Shared, other: Shared)]

        package init(destinations: [String: Destination], limits: any LoginLimiter, metrics: Metrics, errorNames: ErrorNames) {
            func observed(_ destination: Destination, holding: Bool) -> Shared {
                Shared(
                    destination: destination.name,
                    countsUnauthorized: destination.basic != nil && destination.checksHeldCredentials(holdingCredentials: holding), limits: limits,
                    metrics: metrics, errorNames: errorNames)
            }
            shared = destinations.mapValues { (holding: observed($0, holding: true), other: observed($0, holding: false)) }
        }

        /// The observers of the managers of `destination`'s registrations that hold credentials or not.
        package func observers(of destination: Destination, holdingCredentials holds: Bool) -> [any ConversationObserver] {
            guard let pair = shared[destination.name] else { return [] }
            return [ConversationAccounting(shared: holds ? pair.holding : pair.other)]
        }
    }

    package let shared: Shared

    /// The failed-login limiter's key: the conversation's registration (nil for none: nothing is counted).
    private func attempt(_ conversation: Conversation) -> LoginAttempt? {
        conversation.party.flatMap { UUID(uuidString: $0.id) }.map { LoginAttempt(registration: $0) }
    }

    private enum Started: ConversationContextKey { typealias Value = ContinuousClock.Instant }

    package func observe(_ event: ConversationEvent, conversation: Conversation) {
        guard !conversation.manager.isSideRequestManager else { return }
        switch event {
        case .sending(_, _, let attempt) where attempt == 0:
            conversation[Started.self] = .now
        case .finished(let status?):
            if status == 401 && shared.countsUnauthorized, let attempt = attempt(conversation) {
                shared.limits.recordFailedLogin(attempt)
            }
            shared.metrics.increment(.upstreamResponses, [("destination", shared.destination), ("status", Metrics.statusClass(status))])
            if let started = conversation[Started.self] { shared.metrics.observeUpstream(destination: shared.destination, duration: .now - started) }
        case .failed(let error):
            // A problem a filter raised on purpose (interaction, refusal) is an answer, not an upstream error.
            if shared.errorNames.isAnswer(error) { return }
            if let refused = error as? OAuth2Error, refused.code == .refused, let attempt = attempt(conversation) {
                shared.limits.recordFailedLogin(attempt)
            }
            shared.metrics.increment(.upstreamErrors, [("destination", shared.destination), ("kind", shared.errorNames.code(error))])
        default:
            break
        }
    }

    package init(shared: Shared) {
        self.shared = shared
    }
}

extension Destination {
    /// Whether a proxied call of `registration` tries credentials Parley holds for it upstream
    /// (the password grant, or Basic with stored credentials): their failures count as failed logins.
    package func checksHeldCredentials(_ registration: RegistrationRecord) -> Bool {
        checksHeldCredentials(holdingCredentials: registration.credentialsSealed != nil)
    }

    /// The same, for a registration that holds credentials or not.
    package func checksHeldCredentials(holdingCredentials: Bool) -> Bool {
        oauth2?.grant == .password || (basic != nil && holdingCredentials)
    }
}
