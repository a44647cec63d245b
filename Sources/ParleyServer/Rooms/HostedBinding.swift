import AuthFlows
import Conversation
import Foundation

/// The hosted upstream: `/web/{destination}/…` shows a browser in a saml2 or otp
/// flow the destination's upstream origin through Parley, at a path that is the same
/// for every flow of the destination (an identity provider registers the ACS URL once).
///
/// The flow's start page binds the browser to the flow with an `HttpOnly` cookie scoped
/// to that path. A request without a valid binding to a pending flow gets an HTML page
/// and is never forwarded. Requests go out with the flow's registration's cookies (and
/// Basic credentials when asked); what the upstream sets lands in its sealed jar and
/// never reaches the browser. Upstream-origin `Location`s are mapped into the path.
struct HostedBinding: Sendable {
    static let cookieName = "parley_flow"

    let publicURL: String

    var publicParts: URLParts? { URLParts(publicURL) }

    /// Where a destination's upstream is seen: `PUBLIC_URL/web/{destination}`.
    func base(_ destination: String) -> String { publicURL + "/web/" + destination }

    /// The browser path the binding cookie is scoped to (under the public URL's path prefix).
    func cookiePath(_ destination: String) -> String { (publicParts?.path ?? "") + "/web/" + destination + "/" }

    func bindingCookie(flow: FlowRecord, secret: String, destination: String) -> String {
        cookie(value: flow.idString + "." + secret, destination: destination, maxAge: Int(FlowService.lifetime))
    }

    func clearingCookie(destination: String) -> String { cookie(value: "", destination: destination, maxAge: 0) }

    private func cookie(value: String, destination: String, maxAge: Int) -> String {
        let site = publicParts?.isSecure == true ? "Secure; SameSite=None" : "SameSite=Lax"
        return "\(Self.cookieName)=\(value); Path=\(cookiePath(destination)); Max-Age=\(maxAge); HttpOnly; \(site)"
    }

    /// The start of a hosted flow: bind the browser, then open `upstreamURL` through the web path.
    func begin(_ flow: FlowRecord, secret: String, destination: Destination, upstreamURL: String) -> FlowPage {
        .redirect(
            publicLocation(forUpstream: upstreamURL, destination: destination) ?? upstreamURL,
            cookies: [bindingCookie(flow: flow, secret: secret, destination: destination.name)])
    }

    /// An upstream URL under the destination's URL, as the browser sees it; nil for any other URL.
    func publicLocation(forUpstream url: String, destination: Destination) -> String? {
        guard let target = URLParts(url), let origin = URLParts(destination.baseURL), target.origin == origin.origin,
            target.path.hasPrefix(origin.path)
        else { return nil }
        let rest = target.path.dropFirst(origin.path.count)
        guard rest.isEmpty || rest.hasPrefix("/") else { return nil }
        return base(destination.name) + rest + (target.query.map { "?" + $0 } ?? "")
    }
}
