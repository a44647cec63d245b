import Conversation
import Hummingbird
import ParleyDomain

/// Keeps the web origin (`PARLEY_WEB_PUBLIC_URL`) and Parley's own apart, by the request's
/// host (`Host`, the authority): on the web origin's host only the web path (`/web/…`), its
/// hand-over (`/web-bind/…`) and the pages' stylesheet and logos (`/pages/…`) are served, so an upstream page there cannot reach Parley's API,
/// flow pages, callbacks or the Basic form same-origin; on any other host those two are not
/// served, so the web path never runs on Parley's origin. Both refusals are `404`, as for a
/// path that does not exist. Only composed when the web origin is configured.
struct WebOriginGuard: RouterMiddleware {
    typealias Context = ParleyRequestContext

    /// The web origin's host, lower case, without port (IPv6 in brackets, as `URLParts` has it).
    let webHost: String
    let pages: Pages

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let onWebHost = Self.host(of: request.head.authority) == webHost
        let path = request.uri.path
        let webPath = path == "/web" || path.hasPrefix("/web/") || path.hasPrefix("/web-bind/")
        // The pages' stylesheet and logos are served on both hosts: pages on either link to them.
        if path.hasPrefix("/pages/") { return try await next(request, context) }
        if onWebHost && !webPath { return Problem.notFound().render() }
        if !onWebHost && webPath { return pages.notice(.notServedHere, for: request) }
        return try await next(request, context)
    }

    /// The host of an authority (`host`, `host:port`, `[v6]:port`), lower case; nil without one.
    static func host(of authority: String?) -> String? {
        guard let authority, !authority.isEmpty else { return nil }
        var host = Substring(authority)
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            host = host[...close]
        } else if let colon = host.lastIndex(of: ":") {
            host = host[..<colon]
        }
        return host.lowercased()
    }
}
