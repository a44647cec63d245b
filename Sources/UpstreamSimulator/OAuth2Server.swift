import Foundation
import Hummingbird
import ParleyCrypto
import ParleyEncoding

/// How long an authorization code can be redeemed.
private let codeLifetime: Duration = .seconds(600)
/// How long an `id_token` is valid.
private let idTokenLifetime = 300
/// The login session cookie of the authorization server.
private let sessionCookie = "AS_SESSION"

/// Form or query parameters by name; a repeated name is remembered (RFC 6749 §3.1 refuses it).
private struct OAuthParameters {
    private var values: [String: String] = [:]
    private(set) var repeated: [String] = []

    init(_ pairs: [(name: String, value: String)]) {
        for (name, value) in pairs {
            if values[name] != nil { repeated.append(name) }
            values[name] = value
        }
    }

    /// The value, with an empty one treated as absent (RFC 6749 §3.1).
    subscript(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }
}

private struct TokenAnswer: Encodable {
    let access_token: String
    let token_type: String
    let expires_in: Int
    let refresh_token: String?
    let scope: String?
    let id_token: String?
    /// RFC 8693: what a token exchange issued.
    var issued_token_type: String? = nil
}

private struct UserinfoAnswer: Encodable {
    let sub: String
}

private struct ErrorAnswer: Encodable {
    let error: String
    let error_description: String
}

private struct ResourceAnswer: Encodable {
    let message: String
    let sub: String
    let path: String
    /// A propagated token's audience and grant (absent for the others).
    var aud: String? = nil
    var grant: String? = nil
}

/// A checked authorization request (`GET` or `POST /oauth/authorize`).
private struct AuthorizationRequest {
    let client: OAuthClient
    /// Where the answer goes; `redirectURIGiven` tells whether the request named it.
    let redirectURI: String
    let redirectURIGiven: Bool
    let state: String?
    let codeChallenge: String?
    let scope: String?
    /// OpenID Connect: echoed in the `id_token`.
    let nonce: String?
    /// OpenID Connect `prompt` values (`login`: show the login page despite a session; `none`:
    /// never show it).
    let prompt: Set<Substring>
    /// OpenID Connect `max_age`: a login session older than this many seconds does not answer silently.
    let maxAge: Int?
}

private enum AuthorizationCheck {
    case valid(AuthorizationRequest)
    /// The client or redirect URI cannot be trusted: answer with a page, never a redirect.
    case badRequest(String)
    /// A trusted redirect URI gets the error (RFC 6749 §4.1.2.1).
    case redirectError(uri: String, error: String, description: String, state: String?)
}

private func checkAuthorization(_ parameters: OAuthParameters, _ configuration: SimulatorConfiguration) -> AuthorizationCheck {
    if let name = parameters.repeated.first(where: { ["client_id", "redirect_uri"].contains($0) }) {
        return .badRequest("parameter \(name) is repeated")
    }
    guard let clientID = parameters["client_id"] else { return .badRequest("client_id is missing") }
    guard let client = configuration.oauthClients.first(where: { $0.id == clientID }) else {
        return .badRequest("unknown client")
    }
    let redirectURI: String
    if let given = parameters["redirect_uri"] {
        guard client.allows(redirectURI: given) else { return .badRequest("redirect_uri is not registered for this client") }
        redirectURI = given
    } else if client.redirectURIs.count == 1 {
        redirectURI = client.redirectURIs[0]
    } else {
        return .badRequest("redirect_uri is missing")
    }
    let state = parameters["state"]
    func fail(_ error: String, _ description: String) -> AuthorizationCheck {
        .redirectError(uri: redirectURI, error: error, description: description, state: state)
    }
    if let name = parameters.repeated.first { return fail("invalid_request", "parameter \(name) is repeated") }
    guard let responseType = parameters["response_type"] else { return fail("invalid_request", "response_type is missing") }
    guard responseType == "code" else { return fail("unsupported_response_type", "only response_type=code is supported") }
    let challenge = parameters["code_challenge"]
    if let challenge {
        guard parameters["code_challenge_method"] == "S256" else {
            return fail("invalid_request", "code_challenge_method must be S256")
        }
        guard PKCE.isWellFormed(verifier: challenge) else { return fail("invalid_request", "code_challenge is malformed") }
    } else if !client.isConfidential {
        return fail("invalid_request", "public clients must send a PKCE code_challenge")
    }
    return .valid(
        AuthorizationRequest(
            client: client, redirectURI: redirectURI, redirectURIGiven: parameters["redirect_uri"] != nil,
            state: state, codeChallenge: challenge, scope: parameters["scope"], nonce: parameters["nonce"],
            prompt: Set((parameters["prompt"] ?? "").split(separator: " ")), maxAge: parameters["max_age"].flatMap { Int($0) }))
}

/// An authorization response: its parameters, and `iss` naming this server (RFC 9207), as
/// Keycloak and other servers that advertise `authorization_response_iss_parameter_supported` do.
private func redirect(to uri: String, issuer: String, _ parameters: [(String, String?)]) -> Response {
    let query = (parameters + [("iss", issuer)]).compactMap { name, value in value.map { "\(name)=\(SimHTTP.formEncode($0))" } }
        .joined(separator: "&")
    let location = uri + (uri.contains("?") ? "&" : "?") + query
    return Response(status: .found, headers: [.location: location, .cacheControl: "no-store"])
}

private func errorPage(_ message: String) -> Response {
    SimHTTP.html(
        """
        <!doctype html>
        <html><head><meta charset="utf-8"><title>Authorization error</title></head>
        <body><h1>Authorization error</h1><p id="error">\(SimHTTP.htmlEscape(message))</p></body></html>
        """, status: .badRequest)
}

/// The sign-in page; it names the one user, as this server only ever runs in tests and the demo.
private func loginPage(_ request: AuthorizationRequest, error: String?, _ configuration: SimulatorConfiguration) -> Response {
    let hidden: [(String, String?)] = [
        ("response_type", "code"),
        ("client_id", request.client.id),
        ("redirect_uri", request.redirectURIGiven ? request.redirectURI : nil),
        ("state", request.state),
        ("code_challenge", request.codeChallenge),
        ("code_challenge_method", request.codeChallenge == nil ? nil : "S256"),
        ("scope", request.scope),
        ("nonce", request.nonce),
    ]
    let fields = hidden.compactMap { name, value in
        value.map { "<input type=\"hidden\" name=\"\(name)\" value=\"\(SimHTTP.htmlEscape($0))\">" }
    }.joined(separator: "\n      ")
    let errorLine = error.map { "<p id=\"error\" role=\"alert\">\(SimHTTP.htmlEscape($0))</p>" } ?? ""
    return SimHTTP.html(
        """
        <!doctype html>
        <html><head><meta charset="utf-8"><title>Sign in</title></head>
        <body>
          <h1>Sign in</h1>
          <p><b>\(SimHTTP.htmlEscape(request.client.id))</b> asks for access\(request.scope.map { " (\(SimHTTP.htmlEscape($0)))" } ?? "").</p>
          \(errorLine)
          \(demoUserHint(configuration))
          \(otherUsersHint(configuration))
          <form method="post" action="/oauth/authorize">
              \(fields)
              <label>Username <input id="username" name="username" autocomplete="username"></label>
              <label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
              <button id="login" type="submit">Sign in</button>
          </form>
        </body></html>
        """)
}

/// The line that names the authorization server's other users (`oauthUsers`).
private func otherUsersHint(_ configuration: SimulatorConfiguration) -> String {
    guard !configuration.oauthUsers.isEmpty else { return "" }
    let users = configuration.oauthUsers.map { "<b>\(SimHTTP.htmlEscape($0.username))</b> / <b>\(SimHTTP.htmlEscape($0.password))</b>" }
    return "<p id=\"other-users\">Also here: \(users.joined(separator: ", ")).</p>"
}

/// The subject of the user with this name and password: the Basic user or one of `oauthUsers`
/// (each compared in constant time).
private func oauthSubject(username: String, password: String, _ configuration: SimulatorConfiguration) -> String? {
    let users = [SimulatorUser(username: configuration.basicUsername, password: configuration.basicPassword)] + configuration.oauthUsers
    var subject: String?
    for user in users {
        let userOK = SimHTTP.secretsMatch(username, user.username)
        let passwordOK = SimHTTP.secretsMatch(password, user.password)
        if userOK && passwordOK && subject == nil { subject = user.username }
    }
    return subject
}

/// The authorization server's issuer: `oauthIssuer`, else its own address.
private func issuer(_ configuration: SimulatorConfiguration, _ state: SimulatorState) -> String {
    configuration.oauthIssuer ?? "http://127.0.0.1:\(state.port ?? 0)"
}

/// An RFC 9068 access token for `resource` (its `aud`), signed with the demo identity provider's
/// RSA key (`GET /idp/jwks`) and issued in its name, to the client itself (`sub` = `client_id`).
private func accessTokenJWT(
    client: String, resource: String, scope: String?, lifetime: Duration, _ configuration: SimulatorConfiguration, _ state: SimulatorState
) -> Result<IssuedTokens, OAuthError> {
    guard let keys = state.identityProvider else { return .failure(OAuthError(.invalidRequest, "the simulator has no signing keys")) }
    let now = Int(Date().timeIntervalSince1970)
    let seconds = Int(lifetime.components.seconds)
    var claims: [String: Any] = [
        "iss": identityProviderIssuer(configuration, state), "sub": client, "aud": resource, "client_id": client,
        "iat": now, "exp": now + seconds, "jti": SecureRandom.token(byteCount: 12),
    ]
    if let scope { claims["scope"] = scope }
    guard let token = try? keys.token(claims, header: ["typ": "at+jwt"]) else {
        return .failure(OAuthError(.invalidRequest, "signing failed"))
    }
    return .success(IssuedTokens(accessToken: token, refreshToken: nil, expiresIn: seconds, scope: scope))
}

/// A code for `subject`, answered to the client's redirect URI (`302`).
private func issueCode(
    _ authorization: AuthorizationRequest, subject: String, authTime: Int, _ oauth: OAuthState, issuer: String, cookie: String? = nil
) -> Response {
    let code = oauth.issueCode(
        .init(
            grant: OAuthGrant(
                clientID: authorization.client.id, subject: subject, scope: authorization.scope,
                grantID: SecureRandom.token(byteCount: 12), nonce: authorization.nonce, authTime: authTime),
            redirectURI: authorization.redirectURIGiven ? authorization.redirectURI : nil,
            codeChallenge: authorization.codeChallenge,
            expires: .now.advanced(by: codeLifetime)
        ))
    var response = redirect(to: authorization.redirectURI, issuer: issuer, [("code", code), ("state", authorization.state)])
    if let cookie { response.headers[.setCookie] = cookie }
    return response
}

/// The `id_token` (RS256, `kid` `sim-rsa-1`) of a code granted with `openid`.
private func idToken(for grant: OAuthGrant, issuer: String, _ oauth: OAuthState) -> String? {
    guard grant.isOpenID, let signer = oauth.identityIssuer else { return nil }
    let now = Int(Date().timeIntervalSince1970)
    var claims: [String: Any] = ["iss": issuer, "sub": grant.subject, "aud": grant.clientID, "iat": now, "exp": now + idTokenLifetime]
    if let nonce = grant.nonce { claims["nonce"] = nonce }
    if let authTime = grant.authTime { claims["auth_time"] = authTime }
    guard let token = try? signer.token(claims, algorithm: .rs256) else { return nil }
    oauth.recordIDToken(token)
    return token
}

private func tokenError(_ error: OAuthError, request: Request) -> Response {
    var headers: HTTPFields = [.cacheControl: "no-store", .pragma: "no-cache"]
    let status: HTTPResponse.Status = error.code == .invalidClient ? .unauthorized : .badRequest
    if error.code == .invalidClient, SimHTTP.basicCredentials(request) != nil {
        headers[.wwwAuthenticate] = "Basic realm=\"oauth\""  // RFC 6749 §5.2
    }
    return SimHTTP.json(ErrorAnswer(error: error.code.rawValue, error_description: error.description), status: status, headers: headers)
}

private func formParameters(_ request: Request, tap oauth: OAuthState? = nil) async throws -> Result<OAuthParameters, OAuthError> {
    let body = try await SimHTTP.collect(request.body)
    oauth?.tap(request.headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n") + "\n\n" + String(decoding: body, as: UTF8.self))
    let contentType = request.headers[.contentType]?.lowercased() ?? ""
    guard contentType.hasPrefix("application/x-www-form-urlencoded") else {
        return .failure(OAuthError(.invalidRequest, "the body must be application/x-www-form-urlencoded"))
    }
    return .success(OAuthParameters(SimHTTP.formPairs(String(decoding: body, as: UTF8.self))))
}

/// Client authentication (RFC 6749 §2.3): `client_secret_basic`, `client_secret_post`,
/// or a public client's bare `client_id`.
private func authenticateClient(
    _ request: Request, _ form: OAuthParameters, _ configuration: SimulatorConfiguration
) -> Result<OAuthClient, OAuthError> {
    let presented: (id: String, secret: String?)
    if let basic = SimHTTP.basicCredentials(request) {
        let id = SimHTTP.formDecode(basic.user)
        guard form["client_secret"] == nil else {
            return .failure(OAuthError(.invalidRequest, "use one client authentication method"))
        }
        if let bodyID = form["client_id"], bodyID != id {
            return .failure(OAuthError(.invalidRequest, "client_id differs from the Authorization header"))
        }
        presented = (id, SimHTTP.formDecode(basic.password))
    } else if let id = form["client_id"] {
        presented = (id, form["client_secret"])
    } else {
        return .failure(OAuthError(.invalidClient, "client authentication missing"))
    }
    guard let client = configuration.oauthClients.first(where: { $0.id == presented.id }) else {
        return .failure(OAuthError(.invalidClient, "client authentication failed"))
    }
    switch (client.secret, presented.secret) {
    case (nil, nil), (nil, ""):
        return .success(client)
    case (.some(let expected), .some(let secret)) where SimHTTP.secretsMatch(secret, expected):
        return .success(client)
    default:
        return .failure(OAuthError(.invalidClient, "client authentication failed"))
    }
}

private func scopeItems(_ scope: String?) -> Set<Substring> {
    Set((scope ?? "").split(separator: " "))
}

/// Part B of the simulator: an OAuth2 authorization server (RFC 6749, 7636, 7009) that is also an
/// OpenID Connect provider, and two protected resources. Its users are the Basic user
/// (`alice` / `wonderland`) and `oauthUsers` (`bob` / `builder`).
///
/// - `GET /oauth/authorize` — the login page; with a live login session (the `AS_SESSION` cookie a
///   successful login sets, `Path=/oauth`) the code at once, without a page, unless the request
///   carries `prompt=login` or a `max_age` the session's login is older than (or the test control
///   `OAuthState.ignoresFreshLoginRequests` says to answer silently anyway); `prompt=none` without
///   a session is `error=login_required`.
///   `POST /oauth/authorize` — the login: `302` to `redirect_uri?code=…&state=…&iss=…`, and a new
///   session. Every authorization response (errors too) names the issuer in `iss` (RFC 9207).
/// - `POST /oauth/token` — grants `authorization_code` (+ PKCE S256), `client_credentials`,
///   `password`, `refresh_token` (rotating). A code granted with the `openid` scope also gets an
///   `id_token` (RS256, `kid`, `iss` = the issuer, `aud` = the client, `sub`, the request's
///   `nonce`, `auth_time` (the session's login), `iat`, `exp` 5 minutes on). Propagation: RFC 8693 token exchange and RFC 7523 JWT
///   bearer (`propagationGrant`); the resource endpoints echo such a token's `aud` and `grant`.
/// - `GET /oauth/jwks` — the `id_token` keys as a JWK Set.
/// - `GET /.well-known/oauth-authorization-server` — RFC 8414 metadata. A `client_credentials`
///   request with `resource` (RFC 8707) gets an RFC 9068 JWT access token for that resource,
///   signed by the demo identity provider (what an agent presents to Parley).
/// - `GET|POST /oauth/userinfo` — Bearer access token granted with `openid` → `{"sub": …}`;
///   `401` + `WWW-Authenticate: Bearer error="invalid_token"` without a valid one, `403`
///   `error="insufficient_scope"` without `openid`.
/// - `POST /oauth/revoke` — RFC 7009.
/// - `ANY /oauth-api/{path…}` — Bearer; `401` + `WWW-Authenticate: Bearer error="invalid_token"` otherwise.
/// - `ANY /sap-api/{path…}` — Bearer; `400` + `X-SMP-AUTHENTICATION-STATUS: 1000` otherwise.
func addOAuth2Routes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    let oauth = state.oauth

    router.get("/oauth/authorize") { request, _ -> Response in
        state.record("GET /oauth/authorize")
        let parameters = OAuthParameters(SimHTTP.formPairs(request.uri.query ?? ""))
        switch checkAuthorization(parameters, configuration) {
        case .badRequest(let message):
            return errorPage(message)
        case .redirectError(let uri, let error, let description, let returnedState):
            return redirect(
                to: uri, issuer: issuer(configuration, state), [("error", error), ("error_description", description), ("state", returnedState)])
        case .valid(let authorization):
            // A login session answers at once, as a real authorization server does, unless the
            // client asks for the login again.
            // (OpenID Connect: `prompt=login`, or a `max_age` the session's login is older than.)
            if let cookie = SimHTTP.cookie(sessionCookie, in: request), let session = oauth.session(cookie) {
                let age = Int(Date().timeIntervalSince1970) - session.authTime
                let fresh = authorization.prompt.contains("login") || authorization.maxAge.map { age >= $0 } == true
                if !fresh || oauth.ignoresFreshLoginRequests {
                    oauth.countSilentAuthorization()
                    return issueCode(authorization, subject: session.subject, authTime: session.authTime, oauth, issuer: issuer(configuration, state))
                }
            }
            if authorization.prompt.contains("none") {
                return redirect(
                    to: authorization.redirectURI, issuer: issuer(configuration, state),
                    [("error", "login_required"), ("error_description", "no login session"), ("state", authorization.state)])
            }
            oauth.countAuthorizePage()
            return loginPage(authorization, error: nil, configuration)
        }
    }

    router.post("/oauth/authorize") { request, _ -> Response in
        state.record("POST /oauth/authorize")
        let body = try await SimHTTP.collect(request.body)
        let parameters = OAuthParameters(SimHTTP.formPairs(String(decoding: body, as: UTF8.self)))
        switch checkAuthorization(parameters, configuration) {
        case .badRequest(let message):
            return errorPage(message)
        case .redirectError(let uri, let error, let description, let returnedState):
            return redirect(
                to: uri, issuer: issuer(configuration, state), [("error", error), ("error_description", description), ("state", returnedState)])
        case .valid(let authorization):
            guard
                let subject = oauthSubject(
                    username: parameters["username"] ?? "", password: parameters["password"] ?? "", configuration)
            else {
                oauth.countLogin(success: false)
                return loginPage(authorization, error: "Wrong username or password.", configuration)
            }
            oauth.countLogin(success: true)
            let now = Int(Date().timeIntervalSince1970)
            let session = oauth.startSession(subject: subject, authTime: now)
            return issueCode(
                authorization, subject: subject, authTime: now, oauth, issuer: issuer(configuration, state),
                cookie: "\(sessionCookie)=\(session); Path=/oauth; HttpOnly; SameSite=Lax")
        }
    }

    router.post("/oauth/token") { request, _ -> Response in
        state.record("POST /oauth/token")
        let parsed = try await formParameters(request, tap: oauth)
        let grantType = (try? parsed.get())?["grant_type"] ?? "none"
        // The SAML bearer assertion's signature is checked first, by xmlsec1 (as pysaml2 does).
        let samlSignature = grantType == saml2BearerGrant ? await samlSignatureCheck((try? parsed.get())?["assertion"], oauth) : nil
        let (delay, failure) = oauth.beginTokenCall(grant: grantType)
        if delay > .zero { try await Task.sleep(for: delay) }
        if let failure {
            var headers: HTTPFields = [.cacheControl: "no-store"]
            if let retryAfter = failure.retryAfter { headers[.retryAfter] = String(retryAfter) }
            return SimHTTP.json(
                ErrorAnswer(error: failure.error, error_description: "failure injected by /sim/oauth/fail-token"),
                status: HTTPResponse.Status(code: failure.status), headers: headers)
        }

        let outcome: Result<IssuedTokens, OAuthError> = parsed.flatMap { form in
            if let name = form.repeated.first { return .failure(OAuthError(.invalidRequest, "parameter \(name) is repeated")) }
            guard let grant = form["grant_type"] else { return .failure(OAuthError(.invalidRequest, "grant_type is missing")) }
            guard ["authorization_code", "client_credentials", "password", "refresh_token", tokenExchangeGrant, jwtBearerGrant, saml2BearerGrant].contains(grant)
            else {
                return .failure(OAuthError(.unsupportedGrantType, "grant_type \(grant) is not supported"))
            }
            return authenticateClient(request, form, configuration).flatMap { client in
                let now = ContinuousClock.now
                let lifetime = configuration.accessTokenLifetime
                switch grant {
                case "authorization_code":
                    guard let code = form["code"] else { return .failure(OAuthError(.invalidRequest, "code is missing")) }
                    return oauth.redeemCode(
                        code, clientID: client.id, redirectURI: form["redirect_uri"], verifier: form["code_verifier"], now: now
                    ).map { grant in
                        var issued = oauth.issueTokens(for: grant, withRefreshToken: true, lifetime: lifetime, now: now)
                        issued.idToken = idToken(for: grant, issuer: issuer(configuration, state), oauth)
                        return issued
                    }
                case "client_credentials":
                    guard client.isConfidential else {
                        return .failure(OAuthError(.unauthorizedClient, "client_credentials needs a confidential client"))
                    }
                    if let resource = form["resource"] {
                        // RFC 8707: a token for that resource, as an RFC 9068 JWT the resource server checks itself.
                        return accessTokenJWT(client: client.id, resource: resource, scope: form["scope"], lifetime: lifetime, configuration, state)
                    }
                    let grant = OAuthGrant(
                        clientID: client.id, subject: client.id, scope: form["scope"], grantID: SecureRandom.token(byteCount: 12))
                    return .success(oauth.issueTokens(for: grant, withRefreshToken: false, lifetime: lifetime, now: now))
                case "password":
                    guard let username = form["username"], let password = form["password"] else {
                        return .failure(OAuthError(.invalidRequest, "username and password are required"))
                    }
                    guard oauthSubject(username: username, password: password, configuration) != nil else {
                        return .failure(OAuthError(.invalidGrant, "wrong username or password"))
                    }
                    let grant = OAuthGrant(
                        clientID: client.id, subject: username, scope: form["scope"], grantID: SecureRandom.token(byteCount: 12))
                    return .success(oauth.issueTokens(for: grant, withRefreshToken: true, lifetime: lifetime, now: now))
                case saml2BearerGrant:
                    return samlBearerGrant(form: form, signature: samlSignature, client: client, configuration, state).map { grant in
                        oauth.issueTokens(for: grant, withRefreshToken: false, lifetime: lifetime, now: now)
                    }
                case tokenExchangeGrant, jwtBearerGrant:
                    return propagationGrant(grant, form: form, client: client, configuration, state, oauth).map { grant in
                        oauth.issueTokens(for: grant, withRefreshToken: false, lifetime: lifetime, now: now)
                    }
                default:  // refresh_token
                    guard let refreshToken = form["refresh_token"] else {
                        return .failure(OAuthError(.invalidRequest, "refresh_token is missing"))
                    }
                    return oauth.redeemRefreshToken(refreshToken, clientID: client.id).flatMap { grant in
                        var narrowed = grant
                        if let requested = form["scope"] {
                            guard scopeItems(requested).isSubset(of: scopeItems(grant.scope)) else {
                                return .failure(OAuthError(.invalidGrant, "scope exceeds the original grant"))
                            }
                            narrowed = OAuthGrant(clientID: grant.clientID, subject: grant.subject, scope: requested, grantID: grant.grantID)
                        }
                        return .success(oauth.issueTokens(for: narrowed, withRefreshToken: true, lifetime: lifetime, now: now))
                    }
                }
            }
        }
        switch outcome {
        case .success(let issued):
            return SimHTTP.json(
                TokenAnswer(
                    access_token: issued.accessToken, token_type: "Bearer", expires_in: issued.expiresIn,
                    refresh_token: issued.refreshToken, scope: issued.scope, id_token: issued.idToken,
                    issued_token_type: grantType == tokenExchangeGrant ? "urn:ietf:params:oauth:token-type:access_token" : nil),
                headers: [.cacheControl: "no-store", .pragma: "no-cache"])
        case .failure(let error):
            oauth.countTokenError(error.code)
            return tokenError(error, request: request)
        }
    }

    router.post("/oauth/revoke") { request, _ -> Response in
        state.record("POST /oauth/revoke")
        let outcome: Result<Void, OAuthError> = try await formParameters(request, tap: oauth).flatMap { form in
            authenticateClient(request, form, configuration).flatMap { client in
                guard let token = form["token"] else { return .failure(OAuthError(.invalidRequest, "token is missing")) }
                oauth.countRevocation(hint: form["token_type_hint"] ?? "none")
                oauth.revoke(token: token, clientID: client.id)
                return .success(())
            }
        }
        switch outcome {
        case .success:
            return Response(status: .ok, headers: [.cacheControl: "no-store"])
        case .failure(let error):
            return tokenError(error, request: request)
        }
    }

    // RFC 8414: where an agent's SDK finds the token endpoint once Parley's protected-resource
    // metadata named this server.
    router.get("/.well-known/oauth-authorization-server") { _, _ -> Response in
        state.record("GET /.well-known/oauth-authorization-server")
        let base = issuer(configuration, state)
        let metadata: [String: Any] = [
            "issuer": base, "authorization_endpoint": base + "/oauth/authorize", "token_endpoint": base + "/oauth/token",
            "revocation_endpoint": base + "/oauth/revoke", "jwks_uri": base + "/idp/jwks", "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "client_credentials", "refresh_token", "password", tokenExchangeGrant, jwtBearerGrant, saml2BearerGrant],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"], "code_challenge_methods_supported": ["S256"],
        ]
        guard let bytes = try? JSONSerialization.data(withJSONObject: metadata, options: [.sortedKeys]) else {
            return SimHTTP.text("metadata", status: .internalServerError)
        }
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: Array(bytes))))
    }

    router.get("/oauth/jwks") { _, _ -> Response in
        state.record("GET /oauth/jwks")
        guard let signer = oauth.identityIssuer else { return SimHTTP.text("no signing key", status: .internalServerError) }
        return Response(
            status: .ok, headers: [.contentType: "application/jwk-set+json", .cacheControl: "max-age=60"],
            body: .init(byteBuffer: ByteBuffer(bytes: signer.jwks)))
    }

    for method in [HTTPRequest.Method.get, .post] {
        router.on("/oauth/userinfo", method: method) { request, _ -> Response in
            state.record("\(method.rawValue) /oauth/userinfo")
            try await SimHTTP.drain(request.body)
            guard let access = SimHTTP.bearerToken(request).flatMap({ oauth.validate(accessToken: $0) }) else {
                oauth.countUserinfo(rejected: true)
                return SimHTTP.text(
                    "authentication required", status: .unauthorized, headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""])
            }
            guard (access.scope ?? "").split(separator: " ").contains("openid") else {
                oauth.countUserinfo(rejected: true)
                return SimHTTP.text(
                    "the access token was not granted openid", status: .forbidden,
                    headers: [.wwwAuthenticate: "Bearer error=\"insufficient_scope\", scope=\"openid\""])
            }
            oauth.countUserinfo(rejected: false)
            return SimHTTP.json(UserinfoAnswer(sub: access.subject), headers: [.cacheControl: "no-store"])
        }
    }

    let resourceMethods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete]
    for (kind, prefix) in [("oauth-api", "/oauth-api/**"), ("sap-api", "/sap-api/**")] {
        for method in resourceMethods {
            router.on(RouterPath(prefix), method: method) { request, _ -> Response in
                state.record("ANY /\(kind)")
                guard let access = SimHTTP.bearerToken(request).flatMap({ oauth.validate(accessToken: $0) }) else {
                    try await SimHTTP.drain(request.body)
                    oauth.countResource(kind, rejected: true)
                    if kind == "sap-api" {
                        return SimHTTP.text("authentication required", status: .badRequest, headers: [.smpAuthenticationStatus: "1000"])
                    }
                    return SimHTTP.text(
                        "authentication required", status: .unauthorized,
                        headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""])
                }
                try await SimHTTP.drain(request.body)
                oauth.countResource(kind, rejected: false)
                return SimHTTP.json(
                    ResourceAnswer(
                        message: "hello oauth", sub: access.subject, path: request.uri.path, aud: access.audience, grant: access.propagatedBy))
            }
        }
    }
}

let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"
let jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
let saml2BearerGrant = "urn:ietf:params:oauth:grant-type:saml2-bearer"

/// The outcome of the XML signature check of a SAML bearer assertion, and its XML.
private enum SAMLSignatureOutcome {
    case verified(xml: String)
    case refused(String)
}

/// RFC 7522's signature check, as pysaml2 makes it: `assertion` is base64url of one SAML 2.0
/// `Assertion`, and Debian's `xmlsec1` verifies its signature with one of the certificates
/// trusted by `POST /sim/oauth/trust-saml-metadata` (the `ID` attribute of `Assertion` as the
/// reference target). xmlsec1 runs as a child process the handler awaits without blocking a thread.
private func samlSignatureCheck(_ encoded: String?, _ oauth: OAuthState) async -> SAMLSignatureOutcome {
    guard let encoded else { return .refused("assertion is missing") }
    guard let bytes = Base64.decode(encoded), bytes.count <= 256 * 1024 else { return .refused("assertion is not base64url") }
    let xml = String(decoding: bytes, as: UTF8.self)
    oauth.noteAssertion(xml, grant: "saml2_bearer")
    let certificates = oauth.trustedSAMLCertificates
    guard !certificates.isEmpty else { return .refused("no certificate is trusted for SAML assertions") }
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sim-saml-" + SecureRandom.token(byteCount: 8))
    defer { try? FileManager.default.removeItem(at: folder) }
    do {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Data(bytes).write(to: folder.appendingPathComponent("assertion.xml"))
        for (index, certificate) in certificates.enumerated() {
            let path = folder.appendingPathComponent("cert\(index).pem")
            try Data(certificate.utf8).write(to: path)
            let status = await runProcess(
                "/usr/bin/xmlsec1",
                ["--verify", "--pubkey-cert-pem", path.path, "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:assertion:Assertion",
                 folder.appendingPathComponent("assertion.xml").path])
            if status == 0 { return .verified(xml: xml) }
        }
    } catch {
        return .refused("the assertion could not be written for xmlsec1")
    }
    return .refused("xmlsec1 verifies it with no trusted certificate")
}

/// A child process's exit status (-1 when it cannot start); awaited, not waited for on a thread.
private func runProcess(_ executable: String, _ arguments: [String]) async -> Int32 {
    await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do { try process.run() } catch { continuation.resume(returning: -1) }
    }
}

/// RFC 7522's other checks, once the signature verified: the `Audience` is this server's issuer,
/// the bearer `SubjectConfirmationData` names the token endpoint as `Recipient` and has not
/// expired. The token is the `NameID`'s.
private func samlBearerGrant(
    form: OAuthParameters, signature: SAMLSignatureOutcome?, client: OAuthClient, _ configuration: SimulatorConfiguration,
    _ state: SimulatorState
) -> Result<OAuthGrant, OAuthError> {
    let xml: String
    switch signature {
    case .verified(let verified)?: xml = verified
    case .refused(let reason)?: return .failure(OAuthError(.invalidGrant, "the assertion does not verify: \(reason)"))
    case nil: return .failure(OAuthError(.invalidGrant, "the assertion was not checked"))
    }
    func first(_ pattern: String) -> String? {
        guard let expression = try? NSRegularExpression(pattern: pattern),
            let match = expression.firstMatch(in: xml, range: NSRange(xml.startIndex..., in: xml)),
            let range = Range(match.range(at: 1), in: xml)
        else { return nil }
        return String(xml[range])
    }
    let me = issuer(configuration, state)
    guard let nameID = first("<(?:[A-Za-z0-9_]+:)?NameID[^>]*>([^<]+)</"), !nameID.isEmpty else {
        return .failure(OAuthError(.invalidGrant, "the assertion names nobody"))
    }
    guard first("<(?:[A-Za-z0-9_]+:)?Audience>([^<]*)</") == me else {
        return .failure(OAuthError(.invalidGrant, "the assertion's Audience is not this authorization server"))
    }
    guard first("Recipient=\"([^\"]*)\"") == me + "/oauth/token" else {
        return .failure(OAuthError(.invalidGrant, "the assertion's Recipient is not this token endpoint"))
    }
    guard let until = first("SubjectConfirmationData NotOnOrAfter=\"([^\"]*)\"").flatMap({ try? Date($0, strategy: .iso8601) }), until > Date()
    else { return .failure(OAuthError(.invalidGrant, "the assertion's subject confirmation has expired")) }
    var granted = OAuthGrant(clientID: client.id, subject: nameID, scope: form["scope"], grantID: SecureRandom.token(byteCount: 12))
    granted.propagatedBy = "saml2_bearer"
    return .success(granted)
}
private let jwtTokenTypes: Set<String> = [
    "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token", "urn:ietf:params:oauth:token-type:access_token",
]

/// RFC 8693 token exchange and RFC 7523 JWT bearer, as an authorization server checks them: the
/// JWT (`subject_token` or `assertion`) must verify (RS256) with the demo identity provider's
/// keys or, for an assertion, with the keys trusted by `POST /sim/oauth/trust-jwks`; it must
/// name a `sub` and not have expired; an assertion's `aud` must name this server (its issuer or
/// token endpoint), and its `jti` must be new. The token is the `sub`'s.
private func propagationGrant(
    _ grant: String, form: OAuthParameters, client: OAuthClient, _ configuration: SimulatorConfiguration, _ state: SimulatorState,
    _ oauth: OAuthState
) -> Result<OAuthGrant, OAuthError> {
    let jwt: String
    var audience: String?
    if grant == tokenExchangeGrant {
        guard let subjectToken = form["subject_token"], let type = form["subject_token_type"] else {
            return .failure(OAuthError(.invalidRequest, "subject_token and subject_token_type are required"))
        }
        guard jwtTokenTypes.contains(type) else { return .failure(OAuthError(.invalidRequest, "subject_token_type \(type) is not supported")) }
        oauth.noteAssertion(subjectToken, grant: "token_exchange")
        jwt = subjectToken
        audience = form["audience"] ?? form["resource"]
    } else {
        guard let assertion = form["assertion"] else { return .failure(OAuthError(.invalidRequest, "assertion is missing")) }
        oauth.noteAssertion(assertion, grant: "jwt_bearer")
        jwt = assertion
    }
    var keySets: [[UInt8]] = []
    if let idp = state.identityProvider { keySets.append(idp.jwks) }
    // Keys an administrator trusts (Parley's JWK Set): for JWT bearer assertions, and for subject
    // tokens of an issuer configured for token exchange (Keycloak's "external token" issuers).
    if let trusted = oauth.trustedAssertionKeys { keySets.append(trusted) }
    guard let claims = keySets.lazy.compactMap({ IdentityIssuer.verifiedClaims(jwt, jwks: $0) }).first else {
        return .failure(OAuthError(.invalidGrant, "the JWT does not verify with a key this server trusts"))
    }
    guard let subject = claims["sub"] as? String, !subject.isEmpty else { return .failure(OAuthError(.invalidGrant, "the JWT names no sub")) }
    let now = Date().timeIntervalSince1970
    guard let expiry = claims["exp"] as? Double ?? (claims["exp"] as? Int).map(Double.init), expiry > now else {
        return .failure(OAuthError(.invalidGrant, "the JWT has expired or has no exp"))
    }
    if grant == jwtBearerGrant {
        let me = issuer(configuration, state)
        let audiences = (claims["aud"] as? [String]) ?? (claims["aud"] as? String).map { [$0] } ?? []
        guard audiences.contains(me) || audiences.contains(me + "/oauth/token") else {
            return .failure(OAuthError(.invalidGrant, "the assertion's aud does not name this authorization server"))
        }
        if let jti = claims["jti"] as? String, !oauth.firstUse(ofAssertion: jti) {
            return .failure(OAuthError(.invalidGrant, "the assertion's jti was used before"))
        }
    }
    var granted = OAuthGrant(clientID: client.id, subject: subject, scope: form["scope"], grantID: SecureRandom.token(byteCount: 12))
    granted.audience = audience
    granted.propagatedBy = grant == tokenExchangeGrant ? "token_exchange" : "jwt_bearer"
    return .success(granted)
}
