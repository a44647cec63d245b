public import Prometheus
import Synchronization

/// Parley's metrics in a Prometheus registry (swift-prometheus), rendered at `/metrics`.
/// Label values come from fixed sets (route templates, status classes, destination
/// names from the configuration), never from request input.
public final class Metrics: Sendable {
    public let registry: PrometheusCollectorRegistry

    /// Every counter Parley keeps, with its help text.
    public enum CounterName: String, Sendable, CaseIterable {
        case httpRequests = "parley_http_requests"
        case upstreamResponses = "parley_upstream_responses"
        case upstreamErrors = "parley_upstream_errors"
        case conversationRestarts = "parley_conversation_restarts"
        case registrations = "parley_registrations"
        case rateLimited = "parley_rate_limited"
        case tokenRefreshes = "parley_token_refreshes"

        var help: String {
            switch self {
            case .httpRequests: "HTTP requests answered, by route and status class."
            case .upstreamResponses: "Final upstream responses, by destination and status class."
            case .upstreamErrors: "Conversations that ended in an upstream error, by destination and kind."
            case .conversationRestarts: "Conversation restarts (challenges, CSRF, filters)."
            case .registrations: "Registration events by action."
            case .rateLimited: "Requests refused by a rate limit, by limit."
            case .tokenRefreshes: "Refresh-token grants by destination and outcome (ok, permanent: invalid_grant, transient: tokens kept)."
            }
        }
    }

    static let durationBuckets: [Duration] = [
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// Label values (in the counter's fixed label order) to the registry's collector, so
    /// that the request path pays a dictionary lookup, not the registry's name building.
    private struct CounterKey: Hashable {
        let name: CounterName
        let first: String
        let second: String
    }
    private let counters = Mutex<[CounterKey: Counter]>([:])
    private let histograms = Mutex<[String: DurationHistogram]>([:])

    /// Every counter uses at most two labels, always in the same order.
    public func increment(_ counter: CounterName, _ labels: [(String, String)] = []) {
        let key = CounterKey(
            name: counter, first: labels.first?.1 ?? "", second: labels.count > 1 ? labels[1].1 : "")
        if let cached = counters.withLock({ $0[key] }) {
            cached.increment()
            return
        }
        let made = registry.makeCounter(
            descriptor: MetricNameDescriptor(metricName: counter.rawValue, unitName: "total", helpText: counter.help), labels: labels)
        counters.withLock { $0[key] = made }
        made.increment()
    }

    /// Time to the response head, by route template.
    public func observe(route: String, duration: Duration) {
        if let cached = histograms.withLock({ $0[route] }) {
            cached.record(duration)
            return
        }
        let made = registry.makeDurationHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "parley_http_request_duration", unitName: "seconds", helpText: "Time to the response head, by route."),
            labels: [("route", route)], buckets: Self.durationBuckets)
        histograms.withLock { $0[route] = made }
        made.record(duration)
    }

    /// The Prometheus text exposition.
    public func render() -> [UInt8] { registry.emitToBuffer() }

    static func statusClass(_ status: Int) -> String {
        switch status {
        case 100..<200: "1xx"
        case 200..<300: "2xx"
        case 300..<400: "3xx"
        case 400..<500: "4xx"
        default: "5xx"
        }
    }
}
