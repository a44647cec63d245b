package import Foundation
package import Logging
package import ServiceLifecycle
package import Synchronization

/// Limits that hold for the cluster, not per instance: each instance says it is alive every
/// `interval` and counts the instances alive within `window` (PostgreSQL is the shared state);
/// a limit of a registration, a destination or a client address is then shared out, each
/// instance enforcing its part (`part(of:)`). Behind a balancer that spreads a client's calls,
/// the cluster together allows about the configured limit; a client pinned to one instance gets
/// that instance's part. Until the first count, and without a database, an instance is alone.
package final class ClusterShare: Service, Sendable {
    package let repository: any InstanceRepository
    package let id = UUID()
    package let interval: Duration
    package let window: Duration
    package let logger: Logger
    private let live = Atomic<Int>(1)
    private let failing = Atomic<Bool>(false)

    package init(repository: any InstanceRepository, interval: Duration = .seconds(2), window: Duration = .seconds(10), logger: Logger) {
        self.repository = repository
        self.interval = interval
        self.window = window
        self.logger = logger
    }

    /// The instances counted last (at least 1).
    package var instances: Int { max(1, live.load(ordering: .relaxed)) }

    /// This instance's part of a cluster-wide `total`: an equal share, rounded up, at least 1.
    package func part(of total: Int) -> Int {
        let n = instances
        return max(1, total / n + (total % n == 0 ? 0 : 1))
    }

    /// This instance's part of a cluster-wide rate or count, unrounded.
    package func fraction(of total: Double) -> Double { total / Double(instances) }

    package func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.beat()
                try await Task.sleep(for: self.interval)
            }
        }
        do { try await repository.leave(id: id) } catch {
            logger.info("this instance's heartbeat row is left to age out", metadata: ["error": "\(error)"])
        }
    }

    /// One heartbeat: the count of live instances, kept; a failure keeps the last count.
    package func beat() async {
        do {
            let counted = try await repository.beat(id: id, window: window)
            let before = live.exchange(max(1, counted), ordering: .relaxed)
            if before != counted { logger.info("instances in the cluster", metadata: ["cluster.instances": "\(counted)"]) }
            if failing.exchange(false, ordering: .relaxed) { logger.info("cluster heartbeat recovered") }
        } catch {
            if !failing.exchange(true, ordering: .relaxed) {
                logger.warning(
                    "cluster heartbeat failed; limits stay shared among the instances counted last",
                    metadata: ["cluster.instances": "\(instances)", "error": "\(error)"])
            }
        }
    }
}
