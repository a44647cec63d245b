import AuthFlows
import ParleyDomain

/// What `/metrics` reads at each scrape, besides the counters: the database pool, the identity
/// providers' key sets, the cluster, the spool, and the hit ratios of the per-instance caches.
struct ScrapeGauges: Sendable {
    let pool: (@Sendable () -> PoolStatistics)?
    let identityTokens: IdentityTokenVerifier
    let cluster: ClusterShare
    let spool: Spool
    let caches: [(name: String, source: any CacheStatisticsSource)]

    func sample(_ metrics: Metrics) {
        if let pool = pool?() {
            metrics.set(.poolConnections, [("state", "open")], Double(pool.open))
            metrics.set(.poolConnections, [("state", "idle")], Double(pool.idle))
            metrics.set(.poolWaiters, [], Double(pool.waiting))
        }
        for (issuer, seconds) in identityTokens.keySetAges() { metrics.set(.identityKeySetAge, [("issuer", issuer)], seconds) }
        metrics.set(.clusterInstances, [], Double(cluster.instances))
        metrics.set(.spoolBytes, [], Double(spool.usedBytes))
        metrics.set(.spoolWrittenBytes, [], Double(spool.bytesWritten))
        metrics.set(.spoolWriteSeconds, [], spool.writeSeconds)
        for (name, source) in caches {
            let statistics = source.cacheStatistics
            metrics.set(.cacheHits, [("cache", name)], Double(statistics.hits))
            metrics.set(.cacheLookups, [("cache", name)], Double(statistics.hits + statistics.misses))
        }
    }
}
