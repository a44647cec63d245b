package import AuthFlows
public import Foundation
package import ParleyCrypto
public import Store

extension RegistrationRecord {
    package init(row: Row) throws {
        self.init(
            id: try row.uuid("id"), destination: try row.string("destination"),
            status: try row.enumValue("status", RegistrationStatus.self), appcidSealed: try row.optionalBytes("appcid_sealed"),
            deviceType: try row.optionalString("device_type"), deviceModel: try row.optionalString("device_model"),
            userHint: try row.optionalString("user_hint"), returnUrl: try row.optionalString("return_url"),
            credentialsSealed: try row.optionalBytes("credentials_sealed"),
            clientCertificateSealed: try row.optionalBytes("client_certificate_sealed"), createdAt: try row.date("created_at"),
            user: try RegistrationUser(row: row), identityTokenSealed: try row.optionalBytes("identity_token_sealed"), client: try row.optionalString("agent_client"),
            signedInAt: try row.optionalDate("signed_in_at"), browserApp: try row.optionalString("browser_app"))
    }
}

extension RegistrationUser {
    /// The `user_*` columns; nil when they are NULL (a CHECK keeps them all or none).
    package init?(row: Row) throws {
        guard let issuer = try row.optionalString("user_issuer"), let subject = try row.optionalString("user_subject") else { return nil }
        guard let verified = try row.optionalBool("user_verified"), let match = try row.optionalString("user_match") else {
            throw StoreError.decoding("the user columns of a registration are incomplete")
        }
        self.init(issuer: issuer, subject: subject, verified: verified, match: match)
    }
}

extension Row {
    /// A text column holding an enum's raw value; an unknown value is a decoding error, not a crash.
    package func enumValue<E: RawRepresentable>(_ column: String, _ type: E.Type) throws -> E where E.RawValue == String {
        let text = try string(column)
        guard let value = E(rawValue: text) else { throw StoreError.decoding("column \(column) holds an unknown value") }
        return value
    }
}

/// Registration rows in PostgreSQL.
public struct PostgresRegistrations: RegistrationRepository {
    package let store: PostgresStore

    public init(store: PostgresStore) { self.store = store }

    package static let columns: SQL = """
        id, destination, status, appcid_sealed, device_type, device_model, user_hint, return_url, credentials_sealed, \
        client_certificate_sealed, created_at, user_issuer, user_subject, user_verified, user_match, identity_token_sealed, \
        agent_client, signed_in_at, browser_app
        """

    public func insert(_ r: RegistrationRecord, clientTokenHash: [UInt8]) async throws {
        try await store.execute(
            """
            INSERT INTO registrations (id, destination, client_token_hash, status, device_type, device_model, user_hint,
                return_url, credentials_sealed, client_certificate_sealed, appcid_sealed, created_at, updated_at,
                user_issuer, user_subject, user_verified, user_match, identity_token_sealed, agent_client, browser_app)
            VALUES (\(r.id), \(r.destination), \(clientTokenHash), \(r.status.rawValue), \(r.deviceType), \(r.deviceModel),
                \(r.userHint), \(r.returnUrl), \(r.credentialsSealed), \(r.clientCertificateSealed), \(r.appcidSealed),
                \(r.createdAt), \(r.createdAt), \(r.user?.issuer), \(r.user?.subject), \(r.user?.verified), \(r.user?.match),
                \(r.identityTokenSealed), \(r.client), \(r.browserApp))
            """)
    }

    public func insertAgent(_ r: RegistrationRecord, clientTokenHash: [UInt8]) async throws -> RegistrationRecord {
        guard let user = r.user, let client = r.client else { throw StoreError.decoding("an agent registration needs a user and a client") }
        // A concurrent first call on another instance may have created it: then that row is the one.
        let inserted = try await store.execute(
            """
            INSERT INTO registrations (id, destination, client_token_hash, status, created_at, updated_at,
                user_issuer, user_subject, user_verified, user_match, identity_token_sealed, agent_client)
            VALUES (\(r.id), \(r.destination), \(clientTokenHash), \(r.status.rawValue), \(r.createdAt), \(r.createdAt),
                \(user.issuer), \(user.subject), \(user.verified), \(user.match), \(r.identityTokenSealed), \(client))
            ON CONFLICT (destination, user_issuer, user_subject, agent_client) WHERE agent_client IS NOT NULL DO NOTHING
            """)
        if inserted > 0 { return r }
        guard let existing = try await find(agent: AgentKey(destination: r.destination, issuer: user.issuer, subject: user.subject, client: client)) else {
            throw StoreError.decoding("the agent registration was neither inserted nor found")
        }
        return existing
    }

    public func find(agent key: AgentKey) async throws -> RegistrationRecord? {
        try await store.query(
            "SELECT " + Self.columns
                + """
                 FROM registrations WHERE destination = \(key.destination) AND user_issuer = \(key.issuer)
                  AND user_subject = \(key.subject) AND agent_client = \(key.client)
                """
        ).first.map(RegistrationRecord.init(row:))
    }

    public func find(clientTokenHash hash: [UInt8]) async throws -> RegistrationRecord? {
        let rows = try await store.query(
            "SELECT " + Self.columns + ", client_token_hash FROM registrations WHERE client_token_hash = \(hash)")
        guard let row = rows.first, constantTimeEquals(try row.bytes("client_token_hash"), hash) else { return nil }
        return try RegistrationRecord(row: row)
    }

    public func find(id: UUID) async throws -> RegistrationRecord? {
        try await store.query("SELECT " + Self.columns + " FROM registrations WHERE id = \(id)").first.map(RegistrationRecord.init(row:))
    }

    public func activate(id: UUID, appcidSealed: [UInt8]?) async throws {
        try await store.execute(
            """
            UPDATE registrations SET status = \(RegistrationStatus.active.rawValue), appcid_sealed = \(appcidSealed), updated_at = now()
            WHERE id = \(id)
            """)
    }

    public func setStatus(_ status: RegistrationStatus, id: UUID) async throws {
        try await store.execute("UPDATE registrations SET status = \(status.rawValue), updated_at = now() WHERE id = \(id)")
    }

    public func changeStatus(from: RegistrationStatus, to: RegistrationStatus, id: UUID, event: LifecycleEvent?) async throws -> Bool {
        let update: SQL = "UPDATE registrations SET status = \(to.rawValue), updated_at = now() WHERE id = \(id) AND status = \(from.rawValue)"
        guard let event else { return try await store.execute(update) > 0 }
        return try await store.execute(PostgresEvents.writing(event, with: update, returning: .registration)) > 0
    }

    public func setCredentials(id: UUID, sealed: [UInt8]) async throws {
        try await store.execute("UPDATE registrations SET credentials_sealed = \(sealed), updated_at = now() WHERE id = \(id)")
    }

    public func setSignedIn(id: UUID, at: Date) async throws {
        try await store.execute("UPDATE registrations SET signed_in_at = \(at), updated_at = now() WHERE id = \(id)")
    }

    public func setIdentityToken(id: UUID, sealed: [UInt8]) async throws {
        try await store.execute("UPDATE registrations SET identity_token_sealed = \(sealed), updated_at = now() WHERE id = \(id)")
    }

    public func setUser(id: UUID, user: RegistrationUser) async throws -> Bool {
        try await store.execute(
            """
            UPDATE registrations SET user_issuer = \(user.issuer), user_subject = \(user.subject), user_verified = \(user.verified),
                user_match = \(user.match), updated_at = now()
            WHERE id = \(id) AND user_subject IS NULL
            """) > 0
    }

    @discardableResult
    public func delete(id: UUID, event: LifecycleEvent?) async throws -> Bool {
        let delete: SQL = "DELETE FROM registrations WHERE id = \(id)"
        guard let event else { return try await store.execute(delete) > 0 }
        return try await store.execute(PostgresEvents.writing(event, with: delete, returning: .registration)) > 0
    }
}
