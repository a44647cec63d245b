import Hummingbird
import Logging
import ParleyCrypto

/// Reads `Authorization: Bearer <token>`; nil when absent or not a bearer token.
func bearerToken(_ request: Request) -> String? {
    guard let authorization = request.headers[.authorization], authorization.utf8.count > 7,
        authorization.prefix(7).lowercased() == "bearer "
    else { return nil }
    let token = authorization.dropFirst(7).trimmingCharacters(in: .whitespaces)
    return token.isEmpty ? nil : token
}

/// A client token → its registration, into `context.registration`; `401 invalid_client_token`
/// (with `WWW-Authenticate: Bearer`) otherwise. An admin token is not a client token.
/// The shape of hummingbird-auth's `AuthenticatorMiddleware`, with the refusal of
/// `IsAuthenticatedMiddleware` folded in.
struct ClientAuthenticator: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let clientTokens: ClientTokens
    /// The proxy path may use a lookup at most 500 ms old.
    let cached: Bool

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token = bearerToken(request), let registration = try await clientTokens.registration(token: token, cached: cached) else {
            throw Problem.invalidClientToken
        }
        var context = context
        context.registration = registration
        context.logger[metadataKey: "registration.id"] = .string(registration.idString)
        return try await next(request, context)
    }
}

/// An admin token → the admin identity, into `context.admin`; `401 invalid_admin_token`
/// otherwise. Only the tokens' SHA-256 hashes are held; every configured hash is
/// compared in constant time, so the time taken does not tell which one matched.
struct AdminAuthenticator: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let tokenHashes: [[UInt8]]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let admin = identify(bearerToken(request)) else { throw Problem.invalidAdminToken }
        var context = context
        context.admin = admin
        context.logger[metadataKey: "admin"] = .string(admin.name)
        return try await next(request, context)
    }

    func identify(_ token: String?) -> AdminIdentity? {
        guard let token, token.utf8.count <= ClientTokens.maxTokenBytes else { return nil }
        let hash = SecretToken.hash(token)
        var match: Int?
        for (index, candidate) in tokenHashes.enumerated() where constantTimeEquals(candidate, hash) && match == nil {
            match = index
        }
        return match.map(AdminIdentity.init(index:))
    }
}
