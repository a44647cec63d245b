package import AuthFlows
package import Foundation
package import Synchronization

/// A revocation that sticks: the not-befores of revoked users and clients, kept in memory (the
/// table is small) and reloaded when any instance records one (`CacheEvent.notBefore`); while
/// the cache signal is lost they are read from the database on every check. A token whose `iat`
/// is before the not-before of its user, its client, or the pair is refused; one without `iat`
/// is refused when any not-before applies.
package final class NotBefores: Sendable {
    package let repository: any NotBeforeRepository

    private struct State {
        package var rows: [NotBeforeKey: Date]?
        package var caching = true
        /// Bumped by every `forget`: a load that began before it is not kept.
        package var generation = 0
    }

    private let state = Mutex(State())

    package init(repository: any NotBeforeRepository) {
        self.repository = repository
    }

    /// The latest not-before that applies to `issuer`'s `subject`, acting through `client` (nil: the user's own token).
    package func notBefore(issuer: String, subject: String, client: String?) async throws -> Date? {
        let rows = try await current()
        var keys = [NotBeforeKey(issuer: issuer, subject: subject)]
        if let client { keys += [NotBeforeKey(issuer: issuer, subject: subject, client: client), .client(client)] }
        return keys.compactMap { rows[$0] }.max()
    }

    /// Whether a token issued at `issuedAt` may still speak for the user (and client).
    package func admits(issuer: String, subject: String, client: String?, issuedAt: Date?) async throws -> Bool {
        guard let limit = try await notBefore(issuer: issuer, subject: subject, client: client) else { return true }
        guard let issuedAt else { return false }
        return issuedAt > limit
    }

    /// Records a not-before (every instance reloads when it commits).
    package func set(_ key: NotBeforeKey, at date: Date) async throws {
        try await repository.set(key, at: date)
        forget()
    }

    package func forget() { state.withLock { $0.rows = nil; $0.generation += 1 } }

    package func setCaching(_ on: Bool) {
        state.withLock {
            $0.caching = on
            $0.rows = nil
            $0.generation += 1
        }
    }

    private func current() async throws -> [NotBeforeKey: Date] {
        let (kept, caching, generation) = state.withLock { ($0.rows, $0.caching, $0.generation) }
        if let kept, caching { return kept }
        let loaded = try await repository.all()
        if caching {
            state.withLock { if $0.generation == generation && $0.caching { $0.rows = loaded } }
        }
        return loaded
    }
}
