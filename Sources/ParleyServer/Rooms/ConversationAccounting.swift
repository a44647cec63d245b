import AuthFlows
import Conversation
import Foundation

/// What a registration's proxied conversations count, watched from the conversation itself
/// rather than from a controller: final answers and errors by destination, the upstream's
/// latency, and failed logins of credentials Parley holds (the failed-login limiter). Side
/// requests (a CSRF token fetch) belong to the conversation that needed them and are not
/// counted on their own.
struct ConversationAccounting: ConversationObserver {
    let registration: RegistrationRecord
    let destination: Destination
    let limits: RateLimits
    let metrics: Metrics

    private enum Started: ConversationContextKey { typealias Value = ContinuousClock.Instant }

    func observe(_ event: ConversationEvent, conversation: Conversation) {
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
            if error is Problem { return }
            if let refused = error as? OAuth2Error, refused.code == .refused {
                limits.recordFailedLogin(LoginAttempt(registration: registration.id))
            }
            metrics.increment(.upstreamErrors, [("destination", destination.name), ("kind", Problem.from(error).code.rawValue)])
        default:
            break
        }
    }
}
