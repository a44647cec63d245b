package import AuthFlows
package import Foundation
package import ParleyCrypto

/// Seals and opens the secrets a registration and its flows keep in their rows.
package struct Secrets: Sendable {
    package let keyRing: KeyRing

    package func seal(credentials: UserCredentials, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(credentials)), associatedData: SealBinding.credentials(id))
    }

    package func seal(certificate: ClientCertificateMaterial, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(certificate)), associatedData: SealBinding.clientCertificate(id))
    }

    package func seal(identity: PropagatedIdentity, id: UUID) throws -> [UInt8] {
        keyRing.seal(Array(try JSONEncoder().encode(identity)), associatedData: SealBinding.identityToken(id))
    }

    package func seal(appcid: String, id: UUID) -> [UInt8] {
        keyRing.seal(appcid, associatedData: SealBinding.appcid(id))
    }

    package func appcid(of r: RegistrationRecord) throws -> String? {
        try r.appcidSealed.map { try keyRing.openString($0, associatedData: SealBinding.appcid(r.id)) }
    }

    /// The registration's secrets, opened for its conversation manager.
    package func material(of r: RegistrationRecord) throws -> RegistrationMaterial {
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

    package func seal(flowSecret: String, flowID: String) -> [UInt8] { keyRing.seal(flowSecret, associatedData: SealBinding.flowSecret(flowID)) }

    package func flowSecret(of flow: FlowRecord) -> String? {
        flow.secretSealed.flatMap { try? keyRing.openString($0, associatedData: SealBinding.flowSecret(flow.idString)) }
    }

    /// A flow kind's state, sealed for its row.
    package func seal(kindState: [UInt8], flowID: String) -> [UInt8] {
        keyRing.seal(kindState, associatedData: SealBinding.flowKindState(flowID))
    }

    /// A flow's staged cookies (`StagedCookies` as JSON), sealed for its row.
    package func seal(stagedCookies: [UInt8], flowID: String) -> [UInt8] {
        keyRing.seal(stagedCookies, associatedData: SealBinding.flowStagedCookies(flowID))
    }

    package func stagedCookies(of flow: FlowRecord) throws -> [UInt8]? {
        try flow.stagedCookies.map { try keyRing.open($0, associatedData: SealBinding.flowStagedCookies(flow.idString)) }
    }

    package func kindState(of flow: FlowRecord) throws -> [UInt8]? {
        try flow.kindState.map { try keyRing.open($0, associatedData: SealBinding.flowKindState(flow.idString)) }
    }

    package init(keyRing: KeyRing) {
        self.keyRing = keyRing
    }
}
