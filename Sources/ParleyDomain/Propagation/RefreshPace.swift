import Synchronization

/// How many refreshes ahead of need run at once, paced by what the authorization server and
/// this instance can take (additive increase, multiplicative decrease, as TCP paces a sender):
/// one more per round of refreshes that came back about as fast as the quickest recent one;
/// a fifth less when they come back more than twice as slow (the server, the network or this
/// instance is saturated), or while requests wait for a database connection; half when the
/// server throttles or fails (`429`, `503`, a timeout). At most one decrease per round (the
/// answers to refreshes sent before a decrease do not cause another), so that a burst of slow
/// answers from one crowded moment counts once.
package final class RefreshPace: Sendable {
    package static let floor = 1
    package static let ceiling = 64
    package static let start = 8

    /// What one refresh ahead of need came to.
    package enum Outcome: Sendable {
        /// The token endpoint answered (a token, or a refusal that says nothing of its load).
        case answered(latency: Duration)
        /// The token endpoint throttled or failed (`429`, `503`, a timeout, an answer lost).
        case throttled
    }

    private struct State {
        var limit = Double(RefreshPace.start)
        /// The quickest recent answer; creeps up by 0.1 % per answer, so that it follows a server
        /// that became slower for good instead of cutting the pace forever.
        var quickest: Duration?
        /// Answers since the last decrease, and how many were in flight then: those answers
        /// (sent before it) say nothing of the new pace, so the next decrease waits for them.
        var sinceDecrease = 0
        var inFlightAtDecrease = 0
    }

    private let state = Mutex(State())
    /// True while this instance is short of something the request path needs (requests waiting
    /// for a database connection).
    private let pressed: @Sendable () -> Bool

    package init(pressed: @escaping @Sendable () -> Bool = { false }) {
        self.pressed = pressed
    }

    /// Refreshes to keep in flight now.
    package var limit: Int {
        let underPressure = pressed()
        return state.withLock { state in
            if underPressure { decrease(&state, by: 0.8) }
            return Int(state.limit)
        }
    }

    package func finished(_ outcome: Outcome) {
        state.withLock { state in
            state.sinceDecrease += 1
            switch outcome {
            case .throttled:
                decrease(&state, by: 0.5)
            case .answered(let latency):
                let quickest = min(state.quickest.map { $0 * 1.001 } ?? latency, latency)
                state.quickest = quickest
                if latency > quickest * 2 + .milliseconds(5) {
                    decrease(&state, by: 0.8)
                } else {
                    state.limit = min(Double(Self.ceiling), state.limit + 1 / state.limit)
                }
            }
        }
    }

    private func decrease(_ state: inout State, by factor: Double) {
        guard state.sinceDecrease >= state.inFlightAtDecrease else { return }
        state.inFlightAtDecrease = Int(state.limit)
        state.limit = max(Double(Self.floor), state.limit * factor)
        state.sinceDecrease = 0
    }
}
