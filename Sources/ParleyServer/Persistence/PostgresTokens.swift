public import AuthFlows
public import Foundation
public import ParleyCrypto
public import Store

/// OAuth2 tokens in PostgreSQL, sealed and bound to their (destination, registration,
/// scope key) identity. Exclusive sections take a transaction-scoped advisory lock on
/// that identity and run on the same connection.
public struct PostgresTokens: TokenRepository {
    let store: PostgresStore
    let keyRing: KeyRing

    public init(store: PostgresStore, keyRing: KeyRing) {
        self.store = store
        self.keyRing = keyRing
    }

    public func load(_ key: TokenKey) async throws -> StoredToken? {
        try await store.withConnection { try await ConnectionTokens(connection: $0, keyRing: keyRing).load(key) }
    }

    public func exclusively<T: Sendable>(_ key: TokenKey, _ body: @Sendable (any TokenAccess) async throws -> T) async throws -> T {
        try await store.withTransaction { connection in
            try await connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(\("parley.token|" + key.description), 0))")
            return try await body(ConnectionTokens(connection: connection, keyRing: keyRing))
        }
    }

    public func markUsed(_ uses: [TokenKey: Date]) async throws {
        guard !uses.isEmpty else { return }
        try await store.withTransaction { connection in
            for (key, at) in uses {
                let registration = key.registrationID.flatMap(UUID.init(uuidString:))
                try await connection.execute(
                    """
                    UPDATE tokens SET last_used_at = \(at) WHERE destination = \(key.destination)
                        AND registration_id IS NOT DISTINCT FROM \(registration)::uuid AND scope_key = \(key.scopeKey)
                        AND (last_used_at IS NULL OR last_used_at < \(at))
                    """)
            }
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

/// Token rows through one connection.
struct ConnectionTokens: TokenAccess {
    let connection: PostgresConnection
    let keyRing: KeyRing

    static func binding(_ key: TokenKey, _ column: String) -> String { "tokens.\(column):\(key.description)" }

    func load(_ key: TokenKey) async throws -> StoredToken? {
        let registration = key.registrationID.flatMap(UUID.init(uuidString:))
        let rows = try await connection.query(
            """
            SELECT access_token_sealed, refresh_token_sealed, token_type, scopes, expires_at FROM tokens
            WHERE destination = \(key.destination) AND registration_id IS NOT DISTINCT FROM \(registration)::uuid AND scope_key = \(key.scopeKey)
            """)
        guard let row = rows.first else { return nil }
        return try Self.decode(row, key: key, keyRing: keyRing)
    }

    static func decode(_ row: Row, key: TokenKey, keyRing: KeyRing) throws -> StoredToken {
        StoredToken(
            accessToken: try keyRing.openString(try row.bytes("access_token_sealed"), associatedData: binding(key, "access")),
            refreshToken: try row.optionalBytes("refresh_token_sealed").map {
                try keyRing.openString($0, associatedData: binding(key, "refresh"))
            },
            tokenType: try row.string("token_type"), scopes: try row.optionalString("scopes"), expiresAt: try row.optionalDate("expires_at"))
    }

    func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {
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

    func delete(_ key: TokenKey) async throws {
        let registration = key.registrationID.flatMap(UUID.init(uuidString:))
        try await connection.execute(
            """
            DELETE FROM tokens WHERE destination = \(key.destination)
                AND registration_id IS NOT DISTINCT FROM \(registration)::uuid AND scope_key = \(key.scopeKey)
            """)
    }
}
