import Foundation
import Hummingbird
import ParleyEncoding

extension HeaderField.Name {
    static let xForwardedProto = Self("X-Forwarded-Proto")!
    static let xForwardedHost = Self("X-Forwarded-Host")!
    static let xForwardedPrefix = Self("X-Forwarded-Prefix")!
    /// SAP's marker on a login page: `com.sap.cloud.security.login: login-request`.
    static let sapSecurityLogin = Self("com.sap.cloud.security.login")!
    /// SMP's marker on the second factor: `x-smp-authentication: otp-challenge`.
    static let smpAuthentication = Self("x-smp-authentication")!
}

/// A request below a mount (`/sp`, `/basic-otp`) as the browser addressed it, directly or
/// through a reverse proxy such as Parley's `/web/{destination}/…`.
struct ExternalView: Sendable {
    /// `{X-Forwarded-Proto or http}://{X-Forwarded-Host}{X-Forwarded-Prefix}` when
    /// `X-Forwarded-Host` is present, `http://{Host}{mount}` otherwise; never ends with `/`.
    let base: String
    /// The raw path below the mount: `""` or starting with `/`.
    let path: String
    /// The raw query without `?`, if any.
    let query: String?
    /// `X-Forwarded-Host` as sent (port included), nil when the request did not come through a proxy.
    let forwardedHost: String?
    /// `X-Forwarded-Prefix` without trailing `/` (`""` for the proxy's root), nil when it was not
    /// sent or `X-Forwarded-Host` was not (then the prefix is ignored, as for `base`).
    let forwardedPrefix: String?

    init(_ request: Request, mount: String) {
        if let host = Self.firstValue(request.headers[.xForwardedHost]) {
            let proto = Self.firstValue(request.headers[.xForwardedProto])?.lowercased()
            let scheme = proto == "https" ? "https" : "http"
            let sentPrefix = Self.firstValue(request.headers[.xForwardedPrefix])
            var prefix = sentPrefix ?? ""
            while prefix.hasSuffix("/") { prefix.removeLast() }
            if !prefix.isEmpty && !prefix.hasPrefix("/") { prefix = "/" + prefix }
            base = "\(scheme)://\(host)\(prefix)"
            forwardedHost = host
            forwardedPrefix = sentPrefix == nil ? nil : prefix
        } else {
            base = "http://\(request.head.authority ?? "127.0.0.1")\(mount)"
            forwardedHost = nil
            forwardedPrefix = nil
        }
        let target = request.head.path ?? "/"
        let rawPath: Substring
        if let mark = target.firstIndex(of: "?") {
            rawPath = target[..<mark]
            query = String(target[target.index(after: mark)...])
        } else {
            rawPath = target[...]
            query = nil
        }
        path = rawPath.hasPrefix(mount) ? String(rawPath.dropFirst(mount.count)) : String(rawPath)
    }

    /// The external URL of `path` below the mount (`"/otp"` → `{base}/otp`).
    func url(_ path: String) -> String { base + path }

    /// The external URL of the requested resource, query included.
    var resourceURL: String { base + path + (query.map { "?" + $0 } ?? "") }

    /// The decoded query parameters (the last of a repeated name wins).
    var queryParameters: [String: String] {
        Dictionary(SimHTTP.formPairs(query ?? "").map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
    }

    /// Whether `url` lies inside this mount: RelayState and original URLs must, so the SP
    /// never redirects a browser elsewhere.
    func contains(_ url: String) -> Bool {
        url == base || url.hasPrefix(base + "/") || url.hasPrefix(base + "?")
    }

    /// The first of a comma-separated header value, trimmed; nil when empty.
    private static func firstValue(_ header: String?) -> String? {
        guard let first = header?.split(separator: ",", maxSplits: 1).first?.trimmingCharacters(in: .whitespaces),
            !first.isEmpty
        else { return nil }
        return first
    }
}

/// A protected area below a path prefix with its own session cookie (`/sp`, `/basic-otp`).
struct WebMount: Sendable {
    let prefix: String
    let cookieName: String
    let sessions: WebSessions
    /// Counted for every request of the area, e.g. `"ANY /sp"`.
    var recordKey: String { "ANY \(prefix)" }

    /// `Set-Cookie` value of a new session: `{cookie}={id}; Path={path}[; Domain={host}]; HttpOnly`,
    /// scoped as `settings.cookieScope` and `settings.cookieDomain` say for a request seen as `view`
    /// (the mount's own path unless a proxy's `X-Forwarded-Prefix` is to be honoured).
    func sessionCookie(_ id: String, view: ExternalView, settings: SPSettings) -> String {
        let path: String
        switch (settings.cookieScope, view.forwardedPrefix) {
        case (.mount, _), (_, nil):
            path = prefix
        case (.forwardedPrefix, let forwarded?):
            path = forwarded.isEmpty ? "/" : forwarded
        case (.forwardedPrefixSlash, let forwarded?):
            path = forwarded + "/"
        }
        var cookie = "\(cookieName)=\(id); Path=\(path)"
        if settings.cookieDomain, let host = view.forwardedHost.map(Self.hostWithoutPort), !host.isEmpty {
            cookie += "; Domain=\(host)"
        }
        return cookie + "; HttpOnly"
    }

    /// `host:port` → `host`, `[v6]:port` → `[v6]`; a host without a port stays as it is.
    static func hostWithoutPort(_ authority: String) -> String {
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            return String(authority[...close])
        }
        guard let colon = authority.lastIndex(of: ":"), authority[authority.index(after: colon)...].allSatisfy(\.isNumber) else {
            return authority
        }
        return String(authority[..<colon])
    }

    /// The session the request's cookie names, if it is still valid.
    func session(of request: Request) -> (id: String, session: WebSession)? {
        guard let id = SimHTTP.cookie(cookieName, in: request), let session = sessions.session(id) else { return nil }
        return (id, session)
    }

    /// Sends every method at the prefix and below it to `handler`, which dispatches on the path itself.
    func route(
        on router: Router<BasicRequestContext>, state: SimulatorState,
        _ handler: @escaping @Sendable (_ request: Request, _ view: ExternalView) async throws -> Response
    ) {
        let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete, .options]
        let prefix = prefix
        let key = recordKey
        for path in [prefix, prefix + "/**"] {
            for method in methods {
                router.on(RouterPath(path), method: method) { request, _ -> Response in
                    state.record(key)
                    return try await handler(request, ExternalView(request, mount: prefix))
                }
            }
        }
    }
}

/// `GET {mount}/api/data`: who the session is and how it signed in (`"saml"`, `"basic-otp"`).
struct UserDataAnswer: Encodable {
    let user: String
    let via: String
}

/// What a protected area's gate decided: the caller's session, or the answer it gets instead.
enum Gate {
    case open(id: String, session: WebSession)
    case closed(Response)
}

extension Response {
    /// `302` to `location`, not to be cached.
    static func redirect(_ location: String, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.location] = location
        fields[.cacheControl] = "no-store"
        return Response(status: .found, headers: fields)
    }

    /// The response with `Set-Cookie: value` added.
    func settingCookie(_ value: String?) -> Response {
        guard let value else { return self }
        var response = self
        response.headers[values: .setCookie].append(value)
        return response
    }
}

/// The second factor of a protected area: the challenge, the passcode form at `{mount}/otp`
/// and the finish page at `{mount}/otp/finished`. The session is the mount's cookie.
enum OTPStage {
    /// `302` to `{base}/otp` with `x-smp-authentication: otp-challenge`; the session remembers
    /// `originalURL` as where to go after the right passcode.
    static func challenge(sessionID: String, originalURL: String, view: ExternalView, mount: WebMount, otp: OTPState) -> Response {
        mount.sessions.setOriginalURL(originalURL, for: sessionID)
        otp.countChallenge()
        return .redirect(view.url("/otp"), headers: [.smpAuthentication: "otp-challenge"])
    }

    /// The OTP challenge when the session has not passed the second factor yet; nil otherwise.
    static func require(
        _ session: (id: String, session: WebSession), view: ExternalView, mount: WebMount, otp: OTPState
    ) -> Response? {
        guard !session.session.otpVerified else { return nil }
        return challenge(sessionID: session.id, originalURL: view.resourceURL, view: view, mount: mount, otp: otp)
    }

    /// Answers the OTP paths below a mount; nil for any other path.
    ///
    /// - `GET {mount}/otp[?redirecttooriginalurl=false]` — the passcode form, posting to the
    ///   same external URL with the query preserved.
    /// - `POST {mount}/otp` (form `passcode`) — right: the session is OTP-verified and `302`s to
    ///   `{base}/otp/finished?finished=true` when `redirecttooriginalurl=false`, to the original
    ///   URL otherwise; wrong: `200` form with an error; no session: `403`.
    /// - `GET {mount}/otp/finished` — `200` "done".
    ///
    /// `codeSource` is where a person finds the current passcode; the form names it.
    static func handle(
        _ request: Request, view: ExternalView, mount: WebMount, otp: OTPState, codeSource: String? = nil
    ) async throws -> Response? {
        switch (view.path, request.method) {
        case ("/otp", .get), ("/otp", .head):
            return form(view: view, error: nil, codeSource: codeSource)
        case ("/otp", .post):
            return try await verify(request, view: view, mount: mount, otp: otp, codeSource: codeSource)
        case ("/otp/finished", .get), ("/otp/finished", .head):
            return SimHTTP.html(page(title: "Done", body: "<h1>Done</h1><p id=\"finished\">done</p>"))
        case ("/otp", _), ("/otp/finished", _):
            try await SimHTTP.drain(request.body)
            return SimHTTP.text("method not allowed", status: .methodNotAllowed)
        default:
            return nil
        }
    }

    private static func verify(
        _ request: Request, view: ExternalView, mount: WebMount, otp: OTPState, codeSource: String?
    ) async throws -> Response {
        let fields = try await SimHTTP.formFields(request.body)
        guard let current = mount.session(of: request) else {
            return SimHTTP.text("no session: sign in first", status: .forbidden)
        }
        guard otp.verify(passcode: fields["passcode"] ?? "", user: current.session.user) else {
            return form(view: view, error: "Wrong passcode. Try the current one.", codeSource: codeSource)
        }
        mount.sessions.markOTPVerified(current.id)
        if view.queryParameters["redirecttooriginalurl"]?.lowercased() == "false" {
            return .redirect(view.url("/otp/finished?finished=true"))
        }
        let original = current.session.originalURL.flatMap { view.contains($0) ? $0 : nil }
        return .redirect(original ?? view.url("/otp/finished?finished=true"))
    }

    /// The passcode form (`200`, also after a wrong passcode).
    static func form(view: ExternalView, error: String?, codeSource: String? = nil) -> Response {
        let action = view.url("/otp") + (view.query.map { "?" + $0 } ?? "")
        let authenticator = "sapauthenticator://fillpasscode?passcode_url=" + SimHTTP.formEncode(view.url("/otp"))
        let errorLine = error.map { "<p id=\"error\" role=\"alert\">\(SimHTTP.htmlEscape($0))</p>" } ?? ""
        let hint = codeSource.map { source in
            let link = SimHTTP.htmlEscape(source)
            return "<p id=\"demo-hint\">Simulator: the current passcode is at <a href=\"\(link)\">\(link)</a> (it changes every 30 s).</p>"
        } ?? ""
        return SimHTTP.html(
            page(
                title: "Passcode",
                body: """
                    <h1>Enter your passcode</h1>
                      \(errorLine)
                      \(hint)
                      <form method="post" action="\(SimHTTP.htmlEscape(action))">
                        <label for="passcode">Passcode</label>
                        <input id="passcode" name="passcode" type="text" inputmode="numeric" autocomplete="one-time-code" \
                    pattern="[0-9]{6}" maxlength="6" required autofocus>
                        <button id="submit" type="submit">Continue</button>
                      </form>
                      <p><a id="authenticator" href="\(SimHTTP.htmlEscape(authenticator))">Open SAP Authenticator</a></p>
                    """))
    }
}

/// Where a person finds the one user's current passcode: `GET /control/otp/code` at the
/// simulator's own address (the OTP form itself may be seen through a proxy).
func passcodeSource(_ configuration: SimulatorConfiguration, _ state: SimulatorState, _ request: Request) -> String {
    let base = state.port.map { "http://127.0.0.1:\($0)" } ?? "http://\(request.head.authority ?? "127.0.0.1")"
    return base + "/control/otp/code?user=" + SimHTTP.formEncode(configuration.basicUsername)
}

/// The line on the sign-in pages that names the one user: the simulator only ever runs in
/// tests and the demo, and a person trying the demo has to know what to type.
func demoUserHint(_ configuration: SimulatorConfiguration) -> String {
    let user = SimHTTP.htmlEscape(configuration.basicUsername)
    let password = SimHTTP.htmlEscape(configuration.basicPassword)
    return "<p id=\"demo-hint\">Simulator: sign in as <b>\(user)</b> with the password <b>\(password)</b>.</p>"
}

/// A small HTML document.
func page(title: String, body: String, onload: String? = nil) -> String {
    """
    <!doctype html>
    <html><head><meta charset="utf-8"><title>\(SimHTTP.htmlEscape(title))</title></head>
    <body\(onload.map { " onload=\"\($0)\"" } ?? "")>
      \(body)
    </body></html>
    """
}
