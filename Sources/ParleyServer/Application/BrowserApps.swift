import AuthFlows
import Conversation
import HTTPTypes
import Hummingbird
import ParleyDomain

/// A browser app's session: its registration's client token in a cookie no script can read
/// (`__Host-parley` under an https public URL, `parley` otherwise; `HttpOnly; Path=/;
/// SameSite=Lax`), and the rule every call it authenticates must keep: `Parley-CSRF: 1`, and an
/// `Origin`, when there is one, of the registration's app. A custom header cannot be sent across
/// sites without a CORS preflight, which only the apps' origins pass (`BrowserAppCORS`).
struct BrowserSession: Sendable {
    let apps: [BrowserApp]
    /// Whether the public URL is https (the cookie is then `Secure` and `__Host-`).
    let secure: Bool

    init(apps: [BrowserApp], publicURL: String) {
        self.apps = apps
        secure = URLParts(publicURL)?.isSecure ?? false
    }

    var cookieName: String { secure ? "__Host-parley" : "parley" }

    /// The `Set-Cookie` value that hands a new browser registration its client token.
    func setCookie(token: String) -> String {
        cookieName + "=" + token + (secure ? "; Secure" : "") + "; HttpOnly; Path=/; SameSite=Lax"
    }

    /// The `Set-Cookie` value that expires the session (logout).
    var expiringCookie: String {
        cookieName + "=" + (secure ? "; Secure" : "") + "; HttpOnly; Path=/; SameSite=Lax; Max-Age=0"
    }

    /// The client token a request carries in the session cookie, if any (one value only: two
    /// different ones, one planted beside the real one, count as none).
    func token(in request: Request) -> String? {
        guard !apps.isEmpty, case .one(let value) = CookieHeader.value(of: cookieName, in: request.headers[values: .cookie]), !value.isEmpty
        else { return nil }
        return String(value)
    }

    /// Whether a request carries `Parley-CSRF: 1`: sent by a script (the header needs a CORS
    /// preflight across origins), never by a form of another site.
    static func sentByScript(_ request: Request) -> Bool { request.headers[.parleyCSRF] == "1" }

    /// Whether a call the cookie authenticates comes from no page (no `Origin`) or from one of
    /// the registration's app's origins (the header is checked before the cookie is looked up).
    func allowsOrigin(of request: Request, app: BrowserApp) -> Bool {
        guard let origin = request.headers[.origin] else { return true }
        return app.allows(origin: origin)
    }

    static var refused: Problem {
        Problem(.forbidden, .forbidden, "a browser app's call needs Parley-CSRF: 1 and must come from one of the app's origins")
    }
}

/// CORS for the browser apps' origins, on `/v1` (RFC 9110 does not say; the Fetch standard
/// does): a preflight from a listed origin is answered `204` with what the app may send, and
/// every answer to such an origin says it may be read with credentials; another origin gets no
/// `Access-Control-*` header, and its preflight `403`. Outermost, so that refusals (problem+json
/// rendered further in) carry the headers too and an app can read them.
struct BrowserAppCORS: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let origins: Set<String>

    static let allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, MERGE"
    static let allowedHeaders = "Accept, Content-Type, If-Match, If-None-Match, Parley-CSRF, Prefer"
    static let exposedHeaders = "Parley-Flow, Retry-After, Location, Preference-Applied, ETag"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/v1" || path.hasPrefix("/v1/"), let origin = request.headers[.origin] else { return try await next(request, context) }
        let listed = origins.contains(origin)
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            guard listed else {
                var refused = Problem(.forbidden, .forbidden, "this origin is not a browser app's").render()
                refused.headers[.vary] = "Origin"
                return refused
            }
            return Response(
                status: .noContent,
                headers: [
                    .accessControlAllowOrigin: origin, .accessControlAllowCredentials: "true",
                    .accessControlAllowMethods: Self.allowedMethods, .accessControlAllowHeaders: Self.allowedHeaders,
                    .accessControlMaxAge: "600", .vary: "Origin",
                ])
        }
        var response = try await next(request, context)
        if let vary = response.headers[.vary] {
            if !vary.lowercased().split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "origin" }) {
                response.headers[.vary] = vary + ", Origin"
            }
        } else {
            response.headers[.vary] = "Origin"
        }
        guard listed else { return response }
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.accessControlAllowCredentials] = "true"
        response.headers[.accessControlExposeHeaders] = Self.exposedHeaders
        return response
    }
}

/// `GET /sdk/parley.js`: the ES module for web apps (docs/api.md, "Browser apps"). Public code,
/// no credentials: any origin may load it (a module script is fetched with CORS).
struct BrowserModule: Sendable {
    @Sendable func serve(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        Response(
            status: .ok,
            headers: [
                .contentType: "text/javascript; charset=utf-8", .cacheControl: "public, max-age=300", .xContentTypeOptions: "nosniff",
                .accessControlAllowOrigin: "*", .crossOriginResourcePolicy: "cross-origin",
            ],
            body: .init(byteBuffer: request.method == .head ? ByteBuffer() : ByteBuffer(string: EmbeddedPages.browserModule)))
    }
}

extension HTTPField.Name {
    static let parleyCSRF = Self("Parley-CSRF")!
}
