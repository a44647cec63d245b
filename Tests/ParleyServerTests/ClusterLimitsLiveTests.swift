import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Testing

/// Limits that hold for the cluster: three real instances on one PostgreSQL count each other
/// (their heartbeats) and each enforces its part of a registration's limit, so calls spread
/// across them by a balancer meet one quota, not three.
@Suite(.serialized) struct ClusterLimitsLiveTests {
    /// Waits (bounded) until every instance counts `n` live instances.
    static func untilEachCounts(_ n: Int, _ instances: [LiveParley]) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        for instance in instances {
            while true {
                let metrics = try await instance.request("GET", "/metrics")
                if metrics.text.contains("parley_cluster_instances \(n)") { break }
                guard ContinuousClock.now < deadline else {
                    Issue.record("instance \(instance.port) does not count \(n) instances: \(metrics.text.split(separator: "\n").filter { $0.contains("cluster") })")
                    return
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    @Test func threeInstancesHoldOneQuotaOfARegistration() async throws {
        var options = LiveOptions()
        options.instances = 3
        try await withLiveParley(
            options: options, adjust: { $0.rateLimits.proxy = RateLimit(count: 30, period: .seconds(60)) }
        ) { live in
            let instances = [live] + live.others
            try await Self.untilEachCounts(3, instances)
            let (_, token) = try await live.register()
            // A balancer's round robin: 90 calls, 30 on each instance.
            var accepted = 0
            var limited = 0
            for index in 0..<90 {
                let answer = try await instances[index % 3].request("GET", "/v1/proxy/api/data", token: token)
                if answer.status == 200 { accepted += 1 }
                if answer.status == 429 {
                    limited += 1
                    #expect(answer.header("Retry-After") != nil)
                }
            }
            // Each instance allows its third (10), and refills a third of 30 a minute while the calls run.
            #expect((30...33).contains(accepted), "accepted \(accepted) of 90 with a cluster limit of 30 (per instance it would be 90)")
            #expect(accepted + limited == 90)
        }
    }
}
