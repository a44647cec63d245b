public import AuthFlows
public import Foundation
public import ParleyCrypto
public import Store

/// OAuth2 tokens in PostgreSQL, sealed and bound to their (destination, registration,
/// scope key) identity. Exclusive sections hold a lease row on that identity
/// (`token_leases`), not a transaction: the token-endpoint call inside a section holds
/// no connection, and each read or write is one short statement on a pooled connection.
public struct PostgresTokens: TokenRepository, CacheStatisticsSource {
    package let store: PostgresStore
    package let keyRing: KeyRing
    /// Tokens as last read here (nil: none stored), by key: the proxy path reads a token on every
    /// request. Every write announces the key (`t:`), so every instance drops its copy; a lost
    /// signal suspends the cache. A cached token has no refresh token: only an exclusive section
    /// uses one, and it reads the row again (`PooledTokens`).
    package let cache = InvalidatedCache<TokenKey, StoredToken?>(
        owner: { key, _ in key.registrationID.flatMap(UUID.init(uuidString:)) },
        weight: { 192 + ($0?.accessToken.utf8.count ?? 0) }, maxBytes: Self.cacheBytes)
    /// The most the cached tokens of one instance weigh (about): 128 MiB.
    package static let cacheBytes = 128 << 20
    /// Longer than a token-endpoint call may take (30 s); a dead holder's lease lapses after it.
    package let leaseDuration: Duration
    /// How long a section waits for another holder before giving up with `503`.
    package let leaseWait: Duration

    public init(store: PostgresStore, keyRing: KeyRing, leaseDuration: Duration = .seconds(45), leaseWait: Duration = .seconds(50)) {
        self.store = store
        self.keyRing = keyRing
        self.leaseDuration = leaseDuration
        self.leaseWait = leaseWait
    }

    /// The token a proxied call sends, without its refresh token (see `cache`).
    public func load(_ key: TokenKey) async throws -> StoredToken? {
        if let cached = cache.value(for: key) { return cached }
        let mark = cache.mark()
        let token = try await store.withConnection {
            try await ConnectionTokens(connection: $0, keyRing: keyRing).load(key, refreshToken: false)
        }
        cache.set(token, for: key, readSince: mark)
        return token
    }

    /// `key` is a cache signal's (`TokenKey.description`); one that names no key drops every token.
    public func forget(key: String?, registrationID: UUID?) {
        if let key {
            if let parsed = TokenKey(description: key) { cache.remove(parsed) } else { cache.removeAll() }
        } else if let registrationID {
            cache.removeAll(owner: registrationID)
        } else {
            cache.removeAll()
        }
    }

    public func setCaching(_ enabled: Bool) { cache.setEnabled(enabled) }

    public var cacheStatistics: CacheStatistics { cache.statistics }

    public func exclusively<T: Sendable>(_ key: TokenKey, _ body: @Sendable (any TokenAccess) async throws -> T) async throws -> T {
        let owner = UUID().uuidString
        try await acquireLease(key, owner: owner)
        let result: T
        do {
            result = try await body(PooledTokens(store: store, keyRing: keyRing, cache: cache))
        } catch {
            await releaseLease(key, owner: owner)
            throw error
        }
        await releaseLease(key, owner: owner)
        return result
    }

    /// Takes the lease, waiting (10 ms doubling to 250 ms) while another live holder has it.
    private func acquireLease(_ key: TokenKey, owner: String) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: leaseWait)
        let seconds = leaseDuration.timeInterval
        var pause = Duration.milliseconds(10)
        while true {
            let rows = try await store.query(
                """
                INSERT INTO token_leases (lock_key, owner, expires_at)
                VALUES (\(key.description), \(owner), now() + \(seconds) * interval '1 second')
                ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
                    WHERE token_leases.expires_at < now()
                RETURNING owner
                """)
            if !rows.isEmpty { return }
            guard clock.now.advanced(by: pause) < deadline else {
                throw OAuth2Error(
                    .temporarilyUnavailable, retryAfter: .seconds(1), detail: "another Parley instance is still obtaining this token")
            }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(250))
        }
    }

    /// Best effort: a lease that cannot be deleted now lapses by itself.
    private func releaseLease(_ key: TokenKey, owner: String) async {
        _ = try? await store.execute("DELETE FROM token_leases WHERE lock_key = \(key.description) AND owner = \(owner)")
    }

    public func markUsed(_ uses: [TokenKey: Date]) async throws {
        guard !uses.isEmpty else { return }
        // In one order on every instance: two instances' batches updating the same rows in
        // different orders deadlock (SQLSTATE 40P01, seen in the soak).
        let ordered = uses.sorted { $0.key.description < $1.key.description }
        try await store.withTransaction { connection in
            for (key, at) in ordered {
                try await connection.execute(
                    """
                    UPDATE tokens SET last_used_at = \(at) WHERE \(ConnectionTokens.row(key))
                        AND (last_used_at IS NULL OR last_used_at < \(at))
                    """)
            }
        }
    }

    public func expiring(destinations: [String], kinds: [String], before: Date, limit: Int) async throws -> [(TokenKey, StoredToken)] {
        let rows = try await store.query(
            """
            SELECT destination, registration_id, scope_key, access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at
            FROM tokens WHERE kind = ANY (string_to_array(\(kinds.joined(separator: ",")), ','))
              AND destination = ANY (string_to_array(\(destinations.joined(separator: ",")), ','))  -- names have no comma
              AND registration_id IS NOT NULL AND refresh_token_sealed IS NOT NULL
              AND expires_at < \(before)
              -- past half its life: a token that lives less than the lead is not refreshed on every look
              AND now() > updated_at + (expires_at - updated_at) / 2
            ORDER BY expires_at LIMIT \(limit)
            """)
        return try rows.map { row in
            let key = TokenKey(
                destination: try row.string("destination"), registrationID: try row.optionalUUID("registration_id").map { $0.uuidString.lowercased() },
                scopeKey: try row.string("scope_key"))
            return (key, try ConnectionTokens.decode(row, key: key, keyRing: keyRing))
        }
    }

    /// Every token of a registration (for revocation at deregistration).
    public func tokens(registrationID: UUID) async throws -> [(TokenKey, StoredToken)] {
        let rows = try await store.query(
            """
            SELECT destination, registration_id, scope_key, access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at
            FROM tokens WHERE registration_id = \(registrationID)
            """)
        return try rows.map { row in
            let key = TokenKey(destination: try row.string("destination"), registrationID: registrationID.uuidString.lowercased(), scopeKey: try row.string("scope_key"))
            return (key, try ConnectionTokens.decode(row, key: key, keyRing: keyRing))
        }
    }
}

/// Token rows inside a lease: one pooled connection per statement, none held between.
/// Reads go to the database (the section re-checks what another instance stored);
/// each write is one transaction with its announcement.
package struct PooledTokens: TokenAccess {
    package let store: PostgresStore
    package let keyRing: KeyRing
    package let cache: InvalidatedCache<TokenKey, StoredToken?>

    package func load(_ key: TokenKey) async throws -> StoredToken? {
        try await store.withConnection { try await ConnectionTokens(connection: $0, keyRing: keyRing).load(key) }
    }

    package func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {
        cache.remove(key)
        defer { cache.remove(key) }
        try await store.withTransaction { connection in
            try await ConnectionTokens(connection: connection, keyRing: keyRing).save(token, for: key, grant: grant)
            try await connection.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(token: key)))")
        }
    }

    package func delete(_ key: TokenKey) async throws {
        cache.remove(key)
        defer { cache.remove(key) }
        try await store.withTransaction { connection in
            try await ConnectionTokens(connection: connection, keyRing: keyRing).delete(key)
            try await connection.execute("SELECT pg_notify(\(PostgresCacheSignals.channel), \(PostgresCacheSignals.payload(token: key)))")
        }
    }
}

/// Token rows through one connection.
package struct ConnectionTokens: TokenAccess {
    package let connection: PostgresConnection
    package let keyRing: KeyRing

    package static func binding(_ key: TokenKey, _ column: String) -> String { "tokens.\(column):\(key.description)" }

    /// The condition that finds `key`'s row by the unique index: `registration_id = $n`, or `IS NULL`
    /// for a destination's shared token (`IS NOT DISTINCT FROM` would say the same, but no index
    /// serves it, and every lookup read every token of the destination).
    package static func row(_ key: TokenKey) -> SQL {
        if let registration = key.registrationID.flatMap(UUID.init(uuidString:)) {
            return "destination = \(key.destination) AND registration_id = \(registration) AND scope_key = \(key.scopeKey)"
        }
        return "destination = \(key.destination) AND registration_id IS NULL AND scope_key = \(key.scopeKey)"
    }

    package func load(_ key: TokenKey) async throws -> StoredToken? {
        try await load(key, refreshToken: true)
    }

    /// Without `refreshToken` the refresh token is not opened (nor kept).
    package func load(_ key: TokenKey, refreshToken: Bool) async throws -> StoredToken? {
        let rows = try await connection.query(
            """
            SELECT access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at FROM tokens WHERE \(Self.row(key))
            """)
        guard let row = rows.first else { return nil }
        return try Self.decode(row, key: key, keyRing: keyRing, refreshToken: refreshToken)
    }

    package static func decode(_ row: Row, key: TokenKey, keyRing: KeyRing, refreshToken: Bool = true) throws -> StoredToken {
        StoredToken(
            accessToken: try keyRing.openString(try row.bytes("access_token_sealed"), associatedData: binding(key, "access")),
            refreshToken: !refreshToken ? nil : try row.optionalBytes("refresh_token_sealed").map {
                try keyRing.openString($0, associatedData: binding(key, "refresh"))
            },
            tokenType: try row.string("token_type"), scopes: try row.optionalString("scopes"), expiresAt: try row.optionalDate("expires_at"))
    }

    package func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {
        let registration = key.registrationID.flatMap(UUID.init(uuidString:))
        let access = keyRing.seal(token.accessToken, associatedData: Self.binding(key, "access"))
        let refresh = token.refreshToken.map { keyRing.seal($0, associatedData: Self.binding(key, "refresh")) }
        try await connection.execute(
            """
            INSERT INTO tokens (id, registration_id, destination, kind, scope_key, access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at)
            VALUES (\(UUID()), \(registration)::uuid, \(key.destination), \(grant.rawValue), \(key.scopeKey), \(access), \(refresh),
                \(token.tokenType), \(token.scopes), \(token.expiresAt))
            ON CONFLICT (destination, registration_id, scope_key) DO UPDATE SET
                kind = EXCLUDED.kind, access_token_sealed = EXCLUDED.access_token_sealed,
                refresh_token_sealed = EXCLUDED.refresh_token_sealed, token_type = EXCLUDED.token_type,
                scopes = EXCLUDED.scopes, expires_at = EXCLUDED.expires_at, updated_at = now()
            """)
    }

    package func delete(_ key: TokenKey) async throws {
        try await connection.execute("DELETE FROM tokens WHERE \(Self.row(key))")
    }
}
