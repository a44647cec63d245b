public import Foundation
package import Synchronization

/// Whose tokens a not-before holds back: a user (`client` nil), a client (`issuer` and `subject`
/// empty), or a user with one client.
public struct NotBeforeKey: Sendable, Hashable {
    public var issuer: String
    public var subject: String
    /// The agent's OAuth client; "" for every client of the user.
    public var client: String

    public init(issuer: String, subject: String, client: String? = nil) {
        self.issuer = issuer
        self.subject = subject
        self.client = client ?? ""
    }

    /// Every token of an agent's client, whoever its user.
    public static func client(_ client: String) -> NotBeforeKey { NotBeforeKey(issuer: "", subject: "", client: client) }
}

/// The revocations' not-befores (`identity_not_before`) and the logout tokens already taken.
public protocol NotBeforeRepository: Sendable {
    /// Every not-before (the table is one row per revoked user or client).
    func all() async throws -> [NotBeforeKey: Date]
    /// Records a not-before (a later one of the same key wins) and tells every instance.
    func set(_ key: NotBeforeKey, at: Date) async throws
    /// Takes a logout token's `jti` once: false when it was taken before.
    func takeLogoutToken(issuer: String, jti: String, expiresAt: Date) async throws -> Bool
}

/// The in-memory twin (the router tier and single-process use): the same rules, no database.
public final class InMemoryNotBefores: NotBeforeRepository {
    private let rows = Mutex<[NotBeforeKey: Date]>([:])
    private let seen = Mutex<Set<String>>([])

    public init() {}

    public func all() async throws -> [NotBeforeKey: Date] { rows.withLock { $0 } }

    public func set(_ key: NotBeforeKey, at: Date) async throws {
        rows.withLock { $0[key] = max($0[key] ?? .distantPast, at) }
    }

    public func takeLogoutToken(issuer: String, jti: String, expiresAt: Date) async throws -> Bool {
        seen.withLock { $0.insert(issuer + "\n" + jti).inserted }
    }
}
