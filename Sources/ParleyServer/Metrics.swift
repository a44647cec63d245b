import Foundation
import Synchronization

/// Counters and one latency histogram, rendered as Prometheus text. Label values
/// come from fixed sets (route templates, status codes), never from user input.
public final class Metrics: Sendable {
    private struct State {
        var counters: [String: [String: Double]] = [:]
        var buckets: [String: [Int]] = [:]
        var sums: [String: Double] = [:]
        var counts: [String: Int] = [:]
    }

    static let bounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    private let state = Mutex(State())
    private let help: [String: String] = [
        "parley_http_requests_total": "HTTP requests answered, by route and status class.",
        "parley_upstream_responses_total": "Final upstream responses, by destination and status class.",
        "parley_upstream_errors_total": "Conversations that ended in an upstream error, by destination and kind.",
        "parley_conversation_restarts_total": "Conversation restarts (challenges, CSRF, filters).",
        "parley_registrations_total": "Registration events by action.",
    ]

    public init() {}

    public func increment(_ name: String, _ labels: [(String, String)] = [], by value: Double = 1) {
        let key = Self.labelText(labels)
        state.withLock { $0.counters[name, default: [:]][key, default: 0] += value }
    }

    public func observe(route: String, seconds: Double) {
        let key = Self.labelText([("route", route)])
        state.withLock { state in
            var buckets = state.buckets[key] ?? Array(repeating: 0, count: Self.bounds.count)
            for (i, bound) in Self.bounds.enumerated() where seconds <= bound { buckets[i] += 1 }
            state.buckets[key] = buckets
            state.sums[key, default: 0] += seconds
            state.counts[key, default: 0] += 1
        }
    }

    public func render() -> String {
        let snapshot = state.withLock { $0 }
        var out = ""
        for name in snapshot.counters.keys.sorted() {
            if let text = help[name] { out += "# HELP \(name) \(text)\n" }
            out += "# TYPE \(name) counter\n"
            for (labels, value) in snapshot.counters[name]!.sorted(by: { $0.key < $1.key }) {
                out += "\(name)\(labels) \(Self.number(value))\n"
            }
        }
        let h = "parley_http_request_duration_seconds"
        out += "# HELP \(h) Time to the response head, by route.\n# TYPE \(h) histogram\n"
        for key in snapshot.buckets.keys.sorted() {
            let inner = key.dropFirst().dropLast()
            for (i, bound) in Self.bounds.enumerated() {
                out += "\(h)_bucket{\(inner),le=\"\(bound)\"} \(snapshot.buckets[key]![i])\n"
            }
            out += "\(h)_bucket{\(inner),le=\"+Inf\"} \(snapshot.counts[key]!)\n"
            out += "\(h)_sum\(key) \(snapshot.sums[key]!)\n\(h)_count\(key) \(snapshot.counts[key]!)\n"
        }
        return out
    }

    static func labelText(_ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        let escaped = labels.map { "\($0.0)=\"\($0.1.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\"" }
        return "{" + escaped.joined(separator: ",") + "}"
    }

    static func number(_ v: Double) -> String { v.rounded() == v ? String(Int64(v)) : String(v) }

    static func statusClass(_ status: Int) -> String { "\(status / 100)xx" }
}
