package import AuthFlows
package import Conversation
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
///
/// With a web origin of its own (`PARLEY_WEB_PUBLIC_URL`) the web path is seen there, away
/// from Parley's pages, and the start page hands the browser over to it (`WebHandover`),
/// which sets the binding cookie on the web origin.
package struct HostedBinding: Sendable {
    package static let cookieName = "parley_flow"

    /// Where the web path is seen: `PARLEY_WEB_PUBLIC_URL`, else `PARLEY_PUBLIC_URL`.
    package let webURL: String
    /// Set when the web path has an origin of its own.
    package let handover: WebHandover?

    package init(publicURL: String, webURL: String? = nil, secrets: Secrets? = nil, clock: (any WallClock)? = nil) {
        self.webURL = webURL ?? publicURL
        if let webURL, let secrets, let clock {
            handover = WebHandover(secrets: secrets, clock: clock, publicURL: publicURL, webURL: webURL)
        } else {
            handover = nil
        }
    }

    /// The browser's side of the web path (the web origin's, when it has one).
    package var publicParts: URLParts? { URLParts(webURL) }

    /// Where a destination's upstream is seen: `WEB_URL/web/{destination}`.
    package func base(_ destination: String) -> String { webURL + "/web/" + destination }

    /// The browser path the binding cookie is scoped to (under the web URL's path prefix).
    package func cookiePath(_ destination: String) -> String { (publicParts?.path ?? "") + "/web/" + destination + "/" }

    package func bindingCookie(flow: FlowRecord, secret: String, destination: String) -> String {
        bindingCookie(flowID: flow.idString, secret: secret, destination: destination)
    }

    package func bindingCookie(flowID: String, secret: String, destination: String) -> String {
        cookie(value: flowID + "." + secret, destination: destination, maxAge: Int(FlowService.lifetime))
    }

    package func clearingCookie(destination: String) -> String { cookie(value: "", destination: destination, maxAge: 0) }

    private func cookie(value: String, destination: String, maxAge: Int) -> String {
        let site = publicParts?.isSecure == true ? "Secure; SameSite=None" : "SameSite=Lax"
        return "\(Self.cookieName)=\(value); Path=\(cookiePath(destination)); Max-Age=\(maxAge); HttpOnly; \(site)"
    }

    /// The start of a hosted flow: bind the browser, then open `upstreamURL` through the web path.
    /// With a web origin of its own, the browser is handed over to it first.
    package func begin(_ flow: FlowRecord, secret: String, destination: Destination, upstreamURL: String) -> FlowPage {
        let location = publicLocation(forUpstream: upstreamURL, destination: destination) ?? upstreamURL
        if let handover { return handover.start(flow: flow, secret: secret, destination: destination.name, location: location) }
        return .redirect(location, cookies: [bindingCookie(flow: flow, secret: secret, destination: destination.name)])
    }

    /// An upstream URL under the destination's URL, as the browser sees it; nil for any other URL.
    package func publicLocation(forUpstream url: String, destination: Destination) -> String? {
        guard let target = URLParts(url), let origin = URLParts(destination.baseURL), target.origin == origin.origin,
            target.path.hasPrefix(origin.path)
        else { return nil }
        let rest = target.path.dropFirst(origin.path.count)
        guard rest.isEmpty || rest.hasPrefix("/") else { return nil }
        return base(destination.name) + rest + (target.query.map { "?" + $0 } ?? "")
    }
}
