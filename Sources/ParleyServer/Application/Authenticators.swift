import HTTPTypes
import Hummingbird
import Logging
import ParleyCrypto
import ParleyDomain

/// Reads `Authorization: Bearer <token>`; nil when absent or not a bearer token.
func bearerToken(_ request: Request) -> String? {
    request.headers[.authorization].flatMap(bearerToken(authorization:))
}

/// The token of an `Authorization: Bearer …` value (the scheme in any case, blanks around the
/// token dropped); nil for another scheme or an empty token. Byte by byte: every proxied call
/// reads it.
func bearerToken(authorization: String) -> String? {
    let bytes = authorization.utf8
    guard bytes.count > 7, bytes.prefix(6).elementsEqual("bearer".utf8, by: { $0 | 0x20 == $1 }),
        bytes.dropFirst(6).first == UInt8(ascii: " ")
    else { return nil }
    func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
    var token = bytes.dropFirst(7).drop(while: isBlank)
    while let last = token.last, isBlank(last) { token = token.dropLast() }
    return token.isEmpty ? nil : String(token)
}

/// A client token → its registration, into `context.registration`; `401 invalid_client_token`
/// (with `WWW-Authenticate: Bearer`) otherwise. An admin token is not a client token. With
/// `agents`, a JWT in its place is an agent's access token (`AgentAccess`), whose registration
/// is the (user, client) pair on the destination `Parley-Destination` names.
/// The shape of hummingbird-auth's `AuthenticatorMiddleware`, with the refusal of
/// `IsAuthenticatedMiddleware` folded in.
struct ClientAuthenticator: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let clientTokens: ClientTokens
    /// The proxy path may use a lookup at most 500 ms old.
    let cached: Bool
    var agents: AgentAccess? = nil
    /// A client address that keeps showing tokens that match nothing is refused before the next
    /// lookup (`PARLEY_RATE_LIMIT_FAILED_CLIENT_TOKENS`): each one costs a database query.
    var limits: RateLimits? = nil
    /// Browser apps' sessions: without `Authorization`, the session cookie is the client token,
    /// for a browser app's registration only, and only with `Parley-CSRF: 1` from its origins.
    var session: BrowserSession? = nil

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let bearer = bearerToken(request)
        let cookie = bearer == nil ? session?.token(in: request) : nil
        if cookie != nil, !BrowserSession.sentByScript(request) { throw BrowserSession.refused }
        guard let token = bearer ?? cookie else { throw Problem.invalidClientToken }
        let found: RegistrationRecord?
        if cookie == nil, let agents, AgentAccess.isJWT(token) {
            found = try await agents.registration(
                token: token, destinationName: request.headers[.parleyDestination], cached: cached,
                logger: context.logger)
        } else {
            var client: String?
            found = try await clientTokens.registration(token: token, cached: cached) {
                guard let limits else { return }
                let address = limits.client(of: request, peer: context.peerAddress)
                client = address
                try limits.checkClientTokenAllowed(client: address)
            }
            if found == nil, let limits, let client { limits.recordFailedClientToken(client: client) }
        }
        guard let registration = found else { throw Problem.invalidClientToken }
        if cookie != nil, let session {
            // A cookie is a browser app's credential only, and holds only from the app's origins.
            guard let app = session.apps.named(registration.browserApp) else { throw Problem.invalidClientToken }
            guard session.allowsOrigin(of: request, app: app) else { throw BrowserSession.refused }
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
/// With `failures`, a presented token that matches none counts against the client address
/// (`PARLEY_RATE_LIMIT_FAILED_ADMIN`) and is audited (`admin.authentication_failed`, the
/// address and never the token); an address over its limit is refused (`429`) before any
/// token it presents is looked at, so guessing cannot go on behind the limit.
struct AdminAuthenticator: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let tokenHashes: [[UInt8]]
    var failures: AdminFailures? = nil

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let presented = bearerToken(request)
        let client = failures?.limits.client(of: request, peer: context.peerAddress)
        if let failures, let client { try failures.limits.checkAdminAllowed(client: client) }
        guard let admin = identify(presented) else {
            if let failures, let client, presented != nil { await failures.failed(client: client, logger: context.logger) }
            throw Problem.invalidAdminToken
        }
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

/// What a failed admin authentication leads to: a count against the client address, an
/// audit event and a log line, none of them with the token.
struct AdminFailures: Sendable {
    let limits: RateLimits
    let audit: AuditLog

    func failed(client: String, logger: Logger) async {
        limits.recordFailedAdmin(client: client)
        logger.notice("admin authentication failed", metadata: ["client.address": .string(client)])
        await audit.record(.adminAuthenticationFailed, actor: .system, detail: ["client": client])
    }
}

/// Every `401` Parley itself answers on `/v1` names where its protected-resource metadata is
/// (RFC 9728 §5.1: `WWW-Authenticate: Bearer resource_metadata="…"`), so an agent's SDK can
/// find the authorization server to get a token from. An upstream's own `401` passed through
/// the proxy is a response, not an error, and keeps the upstream's header.
struct ResourceChallenge: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let agents: AgentAccess

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            var problem = Problem.from(error)
            guard problem.status == .unauthorized else { throw error }
            if problem.headers[.wwwAuthenticate]?.contains("resource_metadata=") != true { problem.headers[.wwwAuthenticate] = agents.challenge() }
            throw problem
        }
    }
}
