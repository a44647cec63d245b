public import AuthFlows
public import Conversation
public import Foundation
public import ParleyCrypto
public import Store

/// A registration's cookie jar in PostgreSQL: one row per cookie, values sealed
/// and bound to (registration, domain, path, name).
public struct PostgresCookies: CookieRepository, CacheStatisticsSource {
    package let store: PostgresStore
    package let keyRing: KeyRing
    /// A registration's jar as last read here; cache signals (and local writes) drop it.
    package let cache = InvalidatedCache<String, CookieJarIndex>(weight: { $0.approximateBytes }, maxBytes: Self.cacheBytes)
    /// The most the cached jars of one instance weigh (about): 256 MiB.
    package static let cacheBytes = 256 << 20

    public init(store: PostgresStore, keyRing: KeyRing) {
        self.store = store
        self.keyRing = keyRing
    }

    public func forget(registrationID: String) { cache.remove(registrationID) }

    public func setCaching(_ enabled: Bool) { cache.setEnabled(enabled) }

    public var cacheStatistics: CacheStatistics { cache.statistics }

    public func cookies(registrationID: String) async throws -> [StoredCookie] {
        try await jar(registrationID: registrationID).cookies
    }

    public func cookieHeader(registrationID: String, for url: URLParts, at now: Date) async throws -> String? {
        try await jar(registrationID: registrationID).header(for: url, at: now)
    }

    private func jar(registrationID: String) async throws -> CookieJarIndex {
        if let cached = cache.value(for: registrationID) { return cached }
        let mark = cache.mark()
        let cookies = try await read(registrationID: registrationID)
        let jar = cookies.isEmpty ? CookieJarIndex.empty : CookieJarIndex(cookies)
        cache.set(jar, for: registrationID, readSince: mark)
        return jar
    }

    private func read(registrationID: String) async throws -> [StoredCookie] {
        guard let id = UUID(uuidString: registrationID) else { return [] }
        let rows = try await store.query(
            """
            SELECT domain, path, name, value_sealed, host_only, secure, http_only, expires_at
            FROM cookies WHERE registration_id = \(id) AND (expires_at IS NULL OR expires_at > now())
            """)
        return try rows.map { row in
            let domain = try row.string("domain")
            let path = try row.string("path")
            let name = try row.string("name")
            let value = try keyRing.openString(
                try row.bytes("value_sealed"), associatedData: SealBinding.cookie(registrationID, domain, path, name))
            return StoredCookie(
                name: name, value: value, domain: domain, path: path, hostOnly: try row.bool("host_only"),
                secure: try row.bool("secure"), httpOnly: try row.bool("http_only"), expiresAt: try row.optionalDate("expires_at"))
        }
    }

    public func apply(registrationID: String, store add: [StoredCookie], delete: [(name: String, domain: String, path: String)]) async throws {
        guard let id = UUID(uuidString: registrationID) else { return }
        cache.remove(registrationID)
        defer { cache.remove(registrationID) }
        try await store.withTransaction { connection in
            for d in delete {
                try await connection.execute(
                    "DELETE FROM cookies WHERE registration_id = \(id) AND domain = \(d.domain) AND path = \(d.path) AND name = \(d.name)")
            }
            for c in add {
                let sealed = keyRing.seal(c.value, associatedData: SealBinding.cookie(registrationID, c.domain, c.path, c.name))
                // The registration may be gone (deleted meanwhile): then nothing is stored.
                try await connection.execute(
                    """
                    INSERT INTO cookies (registration_id, domain, path, name, value_sealed, host_only, secure, http_only, expires_at)
                    SELECT \(id), \(c.domain), \(c.path), \(c.name), \(sealed), \(c.hostOnly), \(c.secure), \(c.httpOnly), \(c.expiresAt)
                    WHERE EXISTS (SELECT 1 FROM registrations WHERE id = \(id))
                    ON CONFLICT (registration_id, domain, path, name) DO UPDATE SET value_sealed = EXCLUDED.value_sealed,
                        host_only = EXCLUDED.host_only, secure = EXCLUDED.secure, http_only = EXCLUDED.http_only,
                        expires_at = EXCLUDED.expires_at, updated_at = now()
                    """)
            }
            if !add.isEmpty {
                // The jar's cap holds even when two instances admit cookies at once:
                // expired cookies go, then the least recently set beyond the cap.
                try await connection.execute(
                    """
                    DELETE FROM cookies WHERE registration_id = \(id) AND (expires_at <= now() OR ctid IN (
                        SELECT ctid FROM cookies WHERE registration_id = \(id) ORDER BY updated_at DESC OFFSET \(Cookies.maxCookies)))
                    """)
            }
            // Every instance drops its copy of this jar when the transaction commits.
            try await connection.execute(
                "SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(cookieJarOf: id)))")
        }
    }
}
