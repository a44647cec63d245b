public import Foundation

/// The contract's flow object: a sign-in a person completes in a browser.
public struct Flow: Sendable, Equatable, Decodable {
    public let id: String
    /// `saml2`, `oauth2`, `otp`, `basic`, …
    public let kind: String
    /// `pending`, `completed`, `failed` or `expired`.
    public let status: String
    /// The page the person opens; `nil` once it is no longer theirs to open.
    public let url: URL?
    public let expiresAt: Date
    /// Why a failed flow failed (`access_denied`, `identity_mismatch`, …).
    public let error: String?

    public var isPending: Bool { status == "pending" }
}

/// The contract's registration object (`clientToken` is taken by the client, never kept here).
public struct Registration: Sendable, Equatable, Decodable {
    public struct User: Sendable, Equatable, Decodable {
        public let issuer: String
        public let subject: String
        public let verified: Bool
    }

    public let id: String
    public let destination: String
    /// `active`, `login_required`, `pending_approval`, `reconnect_required`.
    public let status: String
    public let appcid: String?
    public let deviceType: String?
    public let deviceModel: String?
    public let userHint: String?
    public let user: User?
    public let createdAt: Date
    /// The flow a `login_required` or `reconnect_required` registration waits on.
    public let flow: Flow?
}

/// What `register` sends (`POST /v1/registrations`); `nil` members are left out.
public struct RegistrationRequest: Sendable, Equatable, Encodable {
    public struct Credentials: Sendable, Equatable, Encodable {
        public var username: String
        public var password: String

        public init(username: String, password: String) {
            self.username = username
            self.password = password
        }
    }

    public var deviceType: String?
    public var deviceModel: String?
    public var userHint: String?
    /// Where a finished flow sends the browser (an app's own scheme, for `ASWebAuthenticationSession`).
    public var returnUrl: String?
    /// An ID token of the app's own OpenID Connect sign-in, naming the registration's user.
    public var identityToken: String?
    /// Credentials Parley answers Basic challenges (and the password grant) with.
    public var credentials: Credentials?

    public init(
        deviceType: String? = nil, deviceModel: String? = nil, userHint: String? = nil, returnUrl: String? = nil,
        identityToken: String? = nil, credentials: Credentials? = nil
    ) {
        self.deviceType = deviceType
        self.deviceModel = deviceModel
        self.userHint = userHint
        self.returnUrl = returnUrl
        self.identityToken = identityToken
        self.credentials = credentials
    }
}

/// The thin-client operations this library calls, as `docs/openapi.json` names them (a test
/// holds the two to each other).
public enum ParleyAPI {
    public static let operations: [(method: String, path: String)] = [
        ("POST", "/v1/registrations"), ("GET", "/v1/registrations/me"), ("DELETE", "/v1/registrations/me"),
        ("POST", "/v1/flows"), ("GET", "/v1/flows/{id}"), ("GET", "/v1/proxy/{path}"), ("POST", "/v1/proxy/{path}"),
        ("PUT", "/v1/proxy/{path}"), ("PATCH", "/v1/proxy/{path}"), ("DELETE", "/v1/proxy/{path}"),
    ]
}

/// The body of a problem answer (RFC 9457).
struct ProblemBody: Decodable {
    var code: String?
    var detail: String?
    var flow: Flow?
}

extension JSONDecoder {
    /// The contract's JSON: RFC 3339 times.
    static var parley: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
