package import Foundation

/// Associated data that binds each sealed value to its row: a value moved to
/// another row (or column) does not open.
package enum SealBinding {
    package static func appcid(_ id: UUID) -> String { "registrations.appcid:\(id.uuidString.lowercased())" }
    package static func credentials(_ id: UUID) -> String { "registrations.credentials:\(id.uuidString.lowercased())" }
    package static func clientCertificate(_ id: UUID) -> String { "registrations.client_certificate:\(id.uuidString.lowercased())" }
    package static func identityToken(_ id: UUID) -> String { "registrations.identity_token:\(id.uuidString.lowercased())" }
    package static func cookie(_ registrationID: String, _ domain: String, _ path: String, _ name: String) -> String {
        "cookies:\(registrationID)|\(domain)|\(path)|\(name)"
    }
    package static func flowSecret(_ id: String) -> String { "flows.secret:\(id)" }
    /// The PKCE verifier column of instances before migration 0006 (only `parley rekey` reads it).
    package static func pkceVerifier(_ id: String) -> String { "flows.pkce:\(id)" }
    package static func flowKindState(_ id: String) -> String { "flows.kind_state:\(id)" }
    package static func flowStagedCookies(_ id: String) -> String { "flows.staged_cookies:\(id)" }
}
