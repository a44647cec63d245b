import HTTPTypes
import Hummingbird
import ParleyDomain

/// What keeps the hosted upstream in its box. `/web/{destination}/…` shows an upstream's
/// pages at Parley's own origin, so whatever they run, runs with that origin's powers. The
/// web path takes away the ones that reach past the page itself:
/// - a service worker: a script request (`Service-Worker: script`) is refused and
///   `Service-Worker-Allowed` never reaches the browser, so no upstream script can register
///   itself over Parley's paths;
/// - framing: every answer says `frame-ancestors 'none'` (a policy of its own, enforced beside
///   the upstream's) and `X-Frame-Options: DENY`;
/// - reading Parley from other sites: no `Access-Control-*` answer header passes;
/// - headers that speak for the whole origin (`Clear-Site-Data`, `Strict-Transport-Security`,
///   `Alt-Svc`, `NEL`, `Report-To`) are dropped;
/// - another site's requests: only navigations and the requests a form could have sent pass
///   (`RequestSite.admitsOnWebPath`), so the identity provider's form post to the ACS does.
enum WebPathBox {
    /// Why the web path refuses `request` before looking at a binding, a flow or the upstream; nil when it goes on.
    static func refusal(_ request: Request, origin: String?) -> Problem? {
        if request.headers[.serviceWorker] != nil {
            return Problem(.forbidden, .forbidden, "the web path does not serve service-worker scripts")
        }
        if !RequestSite.admitsOnWebPath(request.method, request.headers, origin: origin) {
            return Problem(.forbidden, .forbidden, "another site may only navigate to this page, not send this request")
        }
        return nil
    }

    /// Answer headers whose power reaches past the page: over the whole origin, or over what other origins may read.
    static let originWide: Set<String> = [
        "service-worker-allowed", "clear-site-data", "strict-transport-security", "alt-svc", "nel", "report-to",
    ]

    static func isStripped(_ name: HTTPField.Name) -> Bool {
        let lower = name.canonicalName
        return lower.hasPrefix("access-control-") || originWide.contains(lower)
    }

    /// Every answer of the web path as it leaves: upstream's, Parley's pages and redirects alike.
    static func boxed(_ response: Response) -> Response {
        var response = response
        response.headers.removeAll { isStripped($0.name) }
        response.headers[.xFrameOptions] = "DENY"
        if !response.headers[values: .contentSecurityPolicy].contains(Self.parleyPagePolicy) {
            response.headers.append(HTTPField(name: .contentSecurityPolicy, value: "frame-ancestors 'none'"))
        }
        return response
    }

    /// The policy of Parley's own pages, which already says `frame-ancestors 'none'`.
    private static let parleyPagePolicy = Page.securityHeaders[.contentSecurityPolicy] ?? ""
}

extension HTTPField.Name {
    static let serviceWorker = Self("Service-Worker")!
}
