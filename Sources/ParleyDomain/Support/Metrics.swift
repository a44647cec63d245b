public import Prometheus
import Synchronization

/// Parley's metrics in a Prometheus registry (swift-prometheus), rendered at `/metrics`.
/// Label values come from fixed sets (route templates, status classes, destination
/// names from the configuration), never from request input; the one exception, an agent's
/// client id, comes from a verified access token and is bounded (`AgentAccess.maxLabelledClients`).
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
        case flows = "parley_flows"
        case agentRequests = "parley_agent_requests"
        case webhookDeliveries = "parley_webhook_deliveries"

        package var help: String {
            switch self {
            case .httpRequests: "HTTP requests answered, by route and status class."
            case .upstreamResponses: "Final upstream responses, by destination and status class."
            case .upstreamErrors: "Conversations that ended in an upstream error, by destination and kind."
            case .conversationRestarts: "Conversation restarts by reason (challenge, csrf, oauth2, … or other)."
            case .registrations: "Registration events by action."
            case .rateLimited: "Requests refused by a rate limit, by limit."
            case .tokenRefreshes:
                "Refresh-token grants by destination, outcome (ok, permanent: invalid_grant, transient: tokens kept) and when (ahead: in the background, request: a call waited)."
            case .flows: "Flows that ended, by kind and outcome (completed, failed, expired)."
            case .webhookDeliveries: "Webhook delivery attempts by outcome (delivered, retry: will be tried again, failed: given up)."
            case .agentRequests:
                "Calls with an agent's access token, by destination, client (the first 100 per instance; then other) and outcome (accepted, invalid_token, forbidden, insufficient_scope)."
            }
        }
    }

    package static let durationBuckets: [Duration] = [
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// Label values (in the counter's fixed label order) to the registry's collector, so
    /// that the request path pays a dictionary lookup, not the registry's name building.
    /// A counter's name and label values (up to three; none of Parley's counters has more).
    private struct CounterKey: Hashable {
        package let name: CounterName
        package let first: String
        package let second: String
        package let third: String
    }
    private let counters = Mutex<[CounterKey: Counter]>([:])
    private let histograms = Mutex<[String: DurationHistogram]>([:])
    private let upstreamHistograms = Mutex<[String: DurationHistogram]>([:])

    /// Every counter uses at most two labels, always in the same order.
    public func increment(_ counter: CounterName, _ labels: [(String, String)] = []) {
        let key = CounterKey(
            name: counter, first: labels.first?.1 ?? "", second: labels.count > 1 ? labels[1].1 : "", third: labels.count > 2 ? labels[2].1 : "")
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

    /// Time from the start of a proxied conversation to the upstream's final response head
    /// (restarts included), by destination.
    public func observeUpstream(destination: String, duration: Duration) {
        if let cached = upstreamHistograms.withLock({ $0[destination] }) {
            cached.record(duration)
            return
        }
        let made = registry.makeDurationHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "parley_upstream_duration", unitName: "seconds",
                helpText: "Proxied conversations: time to the upstream's final response head (restarts included), by destination."),
            labels: [("destination", destination)], buckets: Self.durationBuckets)
        upstreamHistograms.withLock { $0[destination] = made }
        made.record(duration)
    }

    /// Values read when `/metrics` is rendered (pool, spool, caches): gauges, not counters.
    public enum GaugeName: String, Sendable, CaseIterable {
        case poolConnections = "parley_db_pool_connections"
        case poolWaiters = "parley_db_pool_waiters"
        case spoolBytes = "parley_spool_bytes"
        case spoolWrittenBytes = "parley_spool_written_bytes"
        case spoolWriteSeconds = "parley_spool_write_seconds"
        case cacheHits = "parley_cache_hits"
        case cacheLookups = "parley_cache_lookups"
        case webhookPending = "parley_webhook_pending"
        case identityKeySetAge = "parley_identity_key_set_age_seconds"
        case clusterInstances = "parley_cluster_instances"

        package var help: String {
            switch self {
            case .poolConnections: "Database connections of this instance, by state (open, idle)."
            case .poolWaiters: "Requests waiting for a database connection."
            case .spoolBytes: "Bytes held by request-body spool files (the quota is PARLEY_SPOOL_QUOTA_MIB)."
            case .spoolWrittenBytes: "Bytes written into request-body spool files since start."
            case .spoolWriteSeconds:
                "Seconds spent writing request bodies into spool files since start (the page cache's and the disk's share of a large upload)."
            case .cacheHits: "Lookups answered by a per-instance cache since start, by cache."
            case .webhookPending: "Webhook deliveries waiting to be sent or retried (the backlog), as this instance last counted them."
            case .cacheLookups: "Lookups in a per-instance cache since start, by cache (hit ratio = hits / lookups)."
            case .clusterInstances: "Live instances this instance counts (its heartbeat in PostgreSQL): every limit is shared out among them."
            case .identityKeySetAge:
                "Age of each identity provider's key set as this instance keeps it, by issuer: past an hour its refetches are failing, and past seven hours its tokens are refused."
            }
        }
    }

    private let gauges = Mutex<[String: Gauge]>([:])
    private let samplers = Mutex<[@Sendable (Metrics) -> Void]>([])

    public func set(_ gauge: GaugeName, _ labels: [(String, String)] = [], _ value: Double) {
        let key = gauge.rawValue + "|" + labels.map(\.1).joined(separator: "|")
        let existing = gauges.withLock { $0[key] }
        let made = existing ?? registry.makeGauge(descriptor: MetricNameDescriptor(metricName: gauge.rawValue, unitName: "", helpText: gauge.help), labels: labels)
        if existing == nil { gauges.withLock { $0[key] = made } }
        made.set(value)
    }

    /// Runs at every `/metrics` render, before the exposition is written.
    public func addSampler(_ sampler: @escaping @Sendable (Metrics) -> Void) {
        samplers.withLock { $0.append(sampler) }
    }

    /// The Prometheus text exposition.
    public func render() -> [UInt8] {
        for sampler in samplers.withLock({ $0 }) { sampler(self) }
        return registry.emitToBuffer()
    }

    package static func statusClass(_ status: Int) -> String {
        switch status {
        case 100..<200: "1xx"
        case 200..<300: "2xx"
        case 300..<400: "3xx"
        case 400..<500: "4xx"
        default: "5xx"
        }
    }
}
