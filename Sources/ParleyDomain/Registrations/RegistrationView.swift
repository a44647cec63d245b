import AuthFlows
package import Foundation

/// The contract's registration object (docs/api.md, "Registration object"). `appcid` is
/// shown to its own registration only (administrators get `null`); `clientToken` only in
/// the answer that creates the registration.
package struct RegistrationView: Encodable, Sendable {
    package let id: UUID
    package let destination: String
    package let status: String
    @Nullable package var appcid: String?
    @Nullable package var deviceType: String?
    @Nullable package var deviceModel: String?
    @Nullable package var userHint: String?
    /// Whose credentials these are, or `null` until a verified token or a first sign-in says.
    @Nullable package var user: UserView?
    /// The agent's OAuth client, for a registration an agent's access token created; else `null`.
    @Nullable package var client: String?
    package let createdAt: Date
    /// The flow a `login_required` registration waits on.
    @Nullable package var flow: FlowView?
    package let clientToken: String?

    package init(_ record: RegistrationRecord, appcid: String?, flow: FlowView?, clientToken: String? = nil) {
        id = record.id
        destination = record.destination
        status = record.status.rawValue
        self.appcid = appcid
        deviceType = record.deviceType
        deviceModel = record.deviceModel
        userHint = record.userHint
        user = record.user.map(UserView.init)
        client = record.client
        createdAt = record.createdAt
        self.flow = flow
        self.clientToken = clientToken
    }

    /// `{"issuer","subject","verified"}`: the value compared with sign-ins stays inside.
    package struct UserView: Encodable, Sendable {
        package let issuer: String
        package let subject: String
        package let verified: Bool

        package init(_ user: RegistrationUser) {
            issuer = user.issuer
            subject = user.subject
            verified = user.verified
        }

        /// The user an event names (the same three members).
        package init(_ user: EventUser) {
            issuer = user.issuer
            subject = user.subject
            verified = user.verified
        }
    }
}
