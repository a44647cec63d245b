import Foundation
import ParleyTesting
import Testing

import ParleyDomain
@testable import ParleyServer

/// `deploy/observability/`: the Prometheus alert rules pass `promtool check rules` (Debian's
/// `prometheus`), and every metric the rules and the Grafana dashboard name is one Parley exports,
/// taken from what `/metrics` renders, so a renamed metric fails here and not on an operator's
/// wall.
@Suite struct ObservabilityKitTests {
    static let directory = packageRoot + "/deploy/observability"

    /// The metric families `/metrics` renders once every counter, gauge and histogram has a value.
    static func exported() -> Set<String> {
        let metrics = Metrics()
        for counter in Metrics.CounterName.allCases { metrics.increment(counter, [("x", "y")]) }
        for gauge in Metrics.GaugeName.allCases { metrics.set(gauge, [("x", "y")], 1) }
        metrics.observe(route: "/r", duration: .milliseconds(1))
        metrics.observeUpstream(destination: "d", duration: .milliseconds(1))
        let text = String(decoding: metrics.render(), as: UTF8.self)
        return Set(text.matches(of: #/\# TYPE (parley_[a-z_]+) /#).map { String($0.output.1) })
    }

    /// The metric families an expression names (`_bucket`, `_sum`, `_count` belong to their histogram).
    static func named(in text: String) -> Set<String> {
        Set(text.matches(of: /parley_[a-z_]+/).map { match in
            var name = String(match.output)
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) && !name.hasSuffix("_total") {
                name = String(name.dropLast(suffix.count))
            }
            return name
        })
    }

    @Test func theAlertRulesPassPromtool() throws {
        let result = try Tool.run("promtool", ["check", "rules", Self.directory + "/alerts.yml"])
        #expect(result.status == 0 && result.output.contains("SUCCESS"), "\(result)")
        // promtool does check the expressions: a broken one is refused.
        let broken = NSTemporaryDirectory() + "parley-alerts-\(UUID()).yml"
        defer { try? FileManager.default.removeItem(atPath: broken) }
        let text = try String(contentsOfFile: Self.directory + "/alerts.yml", encoding: .utf8)
        try text.replacingOccurrences(of: "max(parley_webhook_pending) > 100", with: "max(parley_webhook_pending > 100")
            .write(toFile: broken, atomically: true, encoding: .utf8)
        #expect(try Tool.run("promtool", ["check", "rules", broken]).status != 0)
    }

    @Test func everyMetricTheRulesAndTheDashboardNameIsExported() throws {
        let exported = Self.exported()
        #expect(exported.contains("parley_http_requests_total") && exported.contains("parley_http_request_duration_seconds"), "\(exported.sorted())")
        let rules = try String(contentsOfFile: Self.directory + "/alerts.yml", encoding: .utf8)
        let dashboard = try String(contentsOfFile: Self.directory + "/grafana-dashboard.json", encoding: .utf8)
        let inRules = Self.named(in: rules)
        let inDashboard = Self.named(in: dashboard)
        #expect(inRules.count >= 8 && inDashboard.count >= 10)
        #expect(inRules.subtracting(exported).isEmpty, "not exported: \(inRules.subtracting(exported).sorted())")
        #expect(inDashboard.subtracting(exported).isEmpty, "not exported: \(inDashboard.subtracting(exported).sorted())")
        // The dashboard is JSON Grafana imports: panels with Prometheus expressions.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(dashboard.utf8)) as? [String: Any])
        let panels = try #require(object["panels"] as? [[String: Any]])
        #expect(panels.allSatisfy { (($0["targets"] as? [[String: Any]]) ?? []).allSatisfy { $0["expr"] is String } })
        // Every family Parley exports is on the dashboard.
        #expect(exported.subtracting(inDashboard).isEmpty,
            "not on the dashboard: \(exported.subtracting(inDashboard).sorted())")
    }
}
