package import AuthFlows
package import Conversation
package import Foundation
package import Logging
package import ServiceLifecycle
package import Synchronization

/// Collects when tokens were sent and writes `last_used_at` in one batch every
/// `interval`: the proxy path never writes to the database for it.
package final class TokenUsage: TokenUsageSink, Sendable {
    package init() {}

    private let pending = Mutex<[TokenKey: Date]>([:])

    package func used(_ key: TokenKey, at: Date) {
        pending.withLock { pending in
            guard pending.count < 100_000 else { return }
            if (pending[key] ?? .distantPast) < at { pending[key] = at }
        }
    }

    /// What was collected since the last call.
    package func drain() -> [TokenKey: Date] { pending.withLock { pending in defer { pending.removeAll() }; return pending } }
}

/// Periodic work of an instance: token use written in batches, and retention (expired
/// flows and cookies, audit events past `PARLEY_AUDIT_RETENTION_DAYS`). Any number of
/// instances may run it at once: each step is idempotent.
package struct Housekeeping: Service {
    package let usage: TokenUsage
    package let tokens: any TokenRepository
    package let retention: (any RetentionRepository)?
    package let auditRetention: Duration
    package let clock: any WallClock
    package let logger: Logger
    package var usageInterval: Duration = .seconds(5)
    package var retentionInterval: Duration = .seconds(600)

    package func run() async throws {
        // Graceful shutdown cancels the wait; what was collected is still written.
        try? await cancelWhenGracefulShutdown {
            var sinceRetention = retentionInterval
            while !Task.isCancelled {
                await flushUsage()
                if sinceRetention >= retentionInterval {
                    await purge()
                    sinceRetention = .zero
                }
                try await Task.sleep(for: usageInterval)
                sinceRetention += usageInterval
            }
        }
        await flushUsage()
    }

    package func flushUsage() async {
        let uses = usage.drain()
        guard !uses.isEmpty else { return }
        do { try await tokens.markUsed(uses) } catch {
            logger.warning("token use not recorded", metadata: ["tokens": "\(uses.count)", "error": "\(error)"])
        }
    }

    package func purge() async {
        guard let retention else { return }
        let now = clock.now
        let auditSeconds = Double(auditRetention.components.seconds)
        do {
            let removed = try await retention.purge(
                flowsBefore: now.addingTimeInterval(-3600), cookiesBefore: now, auditBefore: now.addingTimeInterval(-auditSeconds))
            if removed.flows + removed.cookies + removed.audit > 0 {
                logger.info(
                    "retention", metadata: ["flows": "\(removed.flows)", "cookies": "\(removed.cookies)", "audit": "\(removed.audit)"])
            }
        } catch {
            logger.warning("retention did not run", metadata: ["error": "\(error)"])
        }
    }

    package init(usage: TokenUsage, tokens: any TokenRepository, retention: (any RetentionRepository)? = nil, auditRetention: Duration, clock: any WallClock, logger: Logger, usageInterval: Duration = .seconds(5), retentionInterval: Duration = .seconds(600)) {
        self.usage = usage
        self.tokens = tokens
        self.retention = retention
        self.auditRetention = auditRetention
        self.clock = clock
        self.logger = logger
        self.usageInterval = usageInterval
        self.retentionInterval = retentionInterval
    }
}
