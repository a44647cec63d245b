import AuthFlows
import Conversation
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Collects when tokens were sent and writes `last_used_at` in one batch every
/// `interval`: the proxy path never writes to the database for it.
final class TokenUsage: TokenUsageSink, Sendable {
    private let pending = Mutex<[TokenKey: Date]>([:])

    func used(_ key: TokenKey, at: Date) {
        pending.withLock { pending in
            guard pending.count < 100_000 else { return }
            if (pending[key] ?? .distantPast) < at { pending[key] = at }
        }
    }

    /// What was collected since the last call.
    func drain() -> [TokenKey: Date] { pending.withLock { pending in defer { pending.removeAll() }; return pending } }
}

/// Periodic work of an instance: token use written in batches, and retention (expired
/// flows and cookies, audit events past `PARLEY_AUDIT_RETENTION_DAYS`). Any number of
/// instances may run it at once: each step is idempotent.
struct Housekeeping: Service {
    let usage: TokenUsage
    let tokens: any TokenRepository
    let retention: (any RetentionRepository)?
    let auditRetention: Duration
    let clock: any WallClock
    let logger: Logger
    var usageInterval: Duration = .seconds(5)
    var retentionInterval: Duration = .seconds(600)

    func run() async throws {
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

    func flushUsage() async {
        let uses = usage.drain()
        guard !uses.isEmpty else { return }
        do { try await tokens.markUsed(uses) } catch {
            logger.warning("token use not recorded", metadata: ["tokens": "\(uses.count)", "error": "\(error)"])
        }
    }

    func purge() async {
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
}
