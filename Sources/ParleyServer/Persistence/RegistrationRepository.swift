import AuthFlows
import Foundation
import ParleyCrypto
import Store

/// A registration as stored, secrets still sealed.
struct RegistrationRecord: Sendable {
    var id: UUID
    var destination: String
    var status: String
    var appcidSealed: [UInt8]?
    var deviceType: String?
    var deviceModel: String?
    var userHint: String?
    var returnUrl: String?
    var credentialsSealed: [UInt8]?
    var clientCertificateSealed: [UInt8]?
    var createdAt: Date

    var idString: String { id.uuidString.lowercased() }

    init(row: Row) throws {
        id = try row.uuid("id")
        destination = try row.string("destination")
        status = try row.string("status")
        appcidSealed = try row.optionalBytes("appcid_sealed")
        deviceType = try row.optionalString("device_type")
        deviceModel = try row.optionalString("device_model")
        userHint = try row.optionalString("user_hint")
        returnUrl = try row.optionalString("return_url")
        credentialsSealed = try row.optionalBytes("credentials_sealed")
        clientCertificateSealed = try row.optionalBytes("client_certificate_sealed")
        createdAt = try row.date("created_at")
    }

    init(
        id: UUID, destination: String, status: String, deviceType: String?, deviceModel: String?, userHint: String?,
        returnUrl: String?, credentialsSealed: [UInt8]?, clientCertificateSealed: [UInt8]?, createdAt: Date
    ) {
        self.id = id
        self.destination = destination
        self.status = status
        self.deviceType = deviceType
        self.deviceModel = deviceModel
        self.userHint = userHint
        self.returnUrl = returnUrl
        self.credentialsSealed = credentialsSealed
        self.clientCertificateSealed = clientCertificateSealed
        self.createdAt = createdAt
    }
}

/// Associated data that binds each sealed column to its row.
enum SealBinding {
    static func appcid(_ id: UUID) -> String { "registrations.appcid:\(id.uuidString.lowercased())" }
    static func credentials(_ id: UUID) -> String { "registrations.credentials:\(id.uuidString.lowercased())" }
    static func clientCertificate(_ id: UUID) -> String { "registrations.client_certificate:\(id.uuidString.lowercased())" }
    static func cookie(_ registrationID: String, _ domain: String, _ path: String, _ name: String) -> String {
        "cookies:\(registrationID)|\(domain)|\(path)|\(name)"
    }
}

/// Registration rows. Client tokens are looked up by SHA-256 and compared in constant time.
struct RegistrationRepository: Sendable {
    let store: PostgresStore
    let keyRing: KeyRing

    static let columns: SQL = "id, destination, status, appcid_sealed, device_type, device_model, user_hint, return_url, credentials_sealed, client_certificate_sealed, created_at"

    func insert(_ r: RegistrationRecord, clientTokenHash: [UInt8]) async throws {
        try await store.execute(
            """
            INSERT INTO registrations (id, destination, client_token_hash, status, device_type, device_model, user_hint,
                return_url, credentials_sealed, client_certificate_sealed, created_at, updated_at)
            VALUES (\(r.id), \(r.destination), \(clientTokenHash), \(r.status), \(r.deviceType), \(r.deviceModel),
                \(r.userHint), \(r.returnUrl), \(r.credentialsSealed), \(r.clientCertificateSealed), \(r.createdAt), \(r.createdAt))
            """)
    }

    /// The registration whose client token has this SHA-256, or nil.
    func find(clientTokenHash hash: [UInt8]) async throws -> RegistrationRecord? {
        let rows = try await store.query(
            "SELECT " + Self.columns + ", client_token_hash FROM registrations WHERE client_token_hash = \(hash)")
        guard let row = rows.first, constantTimeEquals(try row.bytes("client_token_hash"), hash) else { return nil }
        return try RegistrationRecord(row: row)
    }

    func find(id: UUID) async throws -> RegistrationRecord? {
        try await store.query("SELECT " + Self.columns + " FROM registrations WHERE id = \(id)").first.map(RegistrationRecord.init(row:))
    }

    func setActive(id: UUID, appcid: String?) async throws {
        let sealed = appcid.map { keyRing.seal($0, associatedData: SealBinding.appcid(id)) }
        try await store.execute(
            "UPDATE registrations SET status = 'active', appcid_sealed = \(sealed), updated_at = now() WHERE id = \(id)")
    }

    func setLoginRequired(id: UUID) async throws {
        try await store.execute("UPDATE registrations SET status = 'login_required', updated_at = now() WHERE id = \(id)")
    }

    /// Deletes the registration; its tokens, cookies and flows go with it (ON DELETE CASCADE).
    @discardableResult
    func delete(id: UUID) async throws -> Bool {
        try await store.execute("DELETE FROM registrations WHERE id = \(id)") > 0
    }

    func appcid(of r: RegistrationRecord) throws -> String? {
        try r.appcidSealed.map { try keyRing.openString($0, associatedData: SealBinding.appcid(r.id)) }
    }

    /// The registration's secrets, opened for its conversation manager.
    func material(of r: RegistrationRecord) throws -> RegistrationMaterial {
        let decoder = JSONDecoder()
        let credentials = try r.credentialsSealed.map {
            try decoder.decode(UserCredentials.self, from: Data(try keyRing.open($0, associatedData: SealBinding.credentials(r.id))))
        }
        let certificate = try r.clientCertificateSealed.map {
            try decoder.decode(
                ClientCertificateMaterial.self, from: Data(try keyRing.open($0, associatedData: SealBinding.clientCertificate(r.id))))
        }
        return RegistrationMaterial(
            registrationID: r.idString, appcid: try appcid(of: r), credentials: credentials, clientCertificate: certificate)
    }
}
