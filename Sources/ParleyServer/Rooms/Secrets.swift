import AuthFlows
import Foundation
import ParleyCrypto

/// Seals and opens the secrets a registration and its flows keep in their rows.
struct Secrets: Sendable {
    let keyRing: KeyRing

    func seal(credentials: UserCredentials, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(credentials)), associatedData: SealBinding.credentials(id))
    }

    func seal(certificate: ClientCertificateMaterial, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(certificate)), associatedData: SealBinding.clientCertificate(id))
    }

    func seal(identity: PropagatedIdentity, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(identity)), associatedData: SealBinding.identityToken(id))
    }

    func seal(appcid: String, id: UUID) -> [UInt8] {
        keyRing.seal(appcid, associatedData: SealBinding.appcid(id))
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
        let identity = try r.identityTokenSealed.map {
            try decoder.decode(PropagatedIdentity.self, from: Data(try keyRing.open($0, associatedData: SealBinding.identityToken(r.id))))
        }
        return RegistrationMaterial(
            registrationID: r.idString, appcid: try appcid(of: r), credentials: credentials, clientCertificate: certificate,
            identity: identity)
    }

    func seal(flowSecret: String, flowID: String) -> [UInt8] { keyRing.seal(flowSecret, associatedData: SealBinding.flowSecret(flowID)) }

    func flowSecret(of flow: FlowRecord) -> String? {
        flow.secretSealed.flatMap { try? keyRing.openString($0, associatedData: SealBinding.flowSecret(flow.idString)) }
    }

    /// A flow kind's state, sealed for its row.
    func seal(kindState: [UInt8], flowID: String) -> [UInt8] {
        keyRing.seal(kindState, associatedData: SealBinding.flowKindState(flowID))
    }

    /// A flow's staged cookies (`StagedCookies` as JSON), sealed for its row.
    func seal(stagedCookies: [UInt8], flowID: String) -> [UInt8] {
        keyRing.seal(stagedCookies, associatedData: SealBinding.flowStagedCookies(flowID))
    }

    func stagedCookies(of flow: FlowRecord) throws -> [UInt8]? {
        try flow.stagedCookies.map { try keyRing.open($0, associatedData: SealBinding.flowStagedCookies(flow.idString)) }
    }

    func kindState(of flow: FlowRecord) throws -> [UInt8]? {
        try flow.kindState.map { try keyRing.open($0, associatedData: SealBinding.flowKindState(flow.idString)) }
    }
}
