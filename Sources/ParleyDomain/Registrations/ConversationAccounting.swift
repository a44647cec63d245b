package import AuthFlows
package import Conversation
import Foundation

/// What a registration's proxied conversations count, watched from the conversation itself
/// rather than from a controller: final answers and errors by destination, the upstream's
/// latency, and failed logins of credentials Parley holds (the failed-login limiter). Side
/// requests (a CSRF token fetch) belong to the conversation that needed them and are not
/// counted on their own.
package struct ConversationAccounting: ConversationObserver {
    package let registration: RegistrationRecord
    package let destination: Destination
    package let limits: any LoginLimiter
    package let metrics: Metrics
    package let errorNames: ErrorNames

    private enum Started: ConversationContextKey { typealias Value = ContinuousClock.Instant }

    package func observe(_ event: ConversationEvent, conversation: Conversation) {
        guard !conversation.manager.isSideRequestManager else { return }
        switch event {
        case .sending(_, _, let attempt) where attempt == 0:
            conversation[Started.self] = .now
        case .finished(let status?):
            if status == 401 && destination.basic != nil && destination.checksHeldCredentials(registration) {
                limits.recordFailedLogin(LoginAttempt(registration: registration.id))
            }
            metrics.increment(.upstreamResponses, [("destination", destination.name), ("status", Metrics.statusClass(status))])
            if let started = conversation[Started.self] { metrics.observeUpstream(destination: destination.name, duration: .now - started) }
        case .failed(let error):
            // A problem a filter raised on purpose (interaction, refusal) is an answer, not an upstream error.
            if errorNames.isAnswer(error) { return }
            if let refused = error as? OAuth2Error, refused.code == .refused {
                limits.recordFailedLogin(LoginAttempt(registration: registration.id))
            }
            metrics.increment(.upstreamErrors, [("destination", destination.name), ("kind", errorNames.code(error))])
        default:
            break
        }
    }

    package init(registration: RegistrationRecord, destination: Destination, limits: any LoginLimiter, metrics: Metrics, errorNames: ErrorNames) {
        self.registration = registration
        self.destination = destination
        self.limits = limits
        self.metrics = metrics
        self.errorNames = errorNames
    }
}

extension Destination {
    /// Whether a proxied call of `registration` tries credentials Parley holds for it upstream
    /// (the password grant, or Basic with stored credentials): their failures count as failed logins.
    package func checksHeldCredentials(_ registration: RegistrationRecord) -> Bool {
        oauth2?.grant == .password || (basic != nil && registration.credentialsSealed != nil)
    }
}
