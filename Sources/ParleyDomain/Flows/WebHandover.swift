import AuthFlows
package import Conversation
package import Foundation
import ParleyCrypto
import ParleyEncoding

extension SealBinding {
    /// What the start page leaves in the browser on Parley's origin, bound to the flow.
    package static func webHandoverStart(_ flowID: String) -> String { "flows.web_handover.start:\(flowID)" }
    /// The ticket Parley's origin hands the web origin, bound to the destination's web path.
    package static func webHandoverTicket(_ destination: String) -> String { "flows.web_handover.ticket:\(destination)" }
}

/// The hand-over of a browser from Parley's origin to the web origin (`PARLEY_WEB_PUBLIC_URL`),
/// where the hosted upstream's binding cookie (`parley_flow`) must be set: Parley's origin
/// cannot set a cookie for another host.
///
/// Whoever holds a hand-over URL must not be able to bind another browser to their flow (that
/// browser's sessions at the identity provider would sign in for them, which the confirmation
/// page exists to stop). So the ticket that sets the binding is good only in the browser that
/// started the flow, and only with a nonce of that browser's on the web origin:
///
/// 1. The start page (Parley's origin) keeps the flow's secret and where to go, sealed, in a
///    cookie (`parley_handover`, `HttpOnly`, `SameSite=Lax`, 5 minutes) and sends the browser to
///    `WEB/web-bind/{destination}?flow={id}`.
/// 2. There (the web origin) the browser gets a random nonce in a cookie (`parley_web_nonce`)
///    and is sent to `PUBLIC/flows/{id}/bind?n=<SHA-256 of the nonce>`.
/// 3. There (Parley's origin) the start cookie must open for this flow and hold its secret: the
///    browser gets a ticket (sealed: flow, secret, where to go, the nonce's hash, 60 s) and goes
///    to `WEB/web-bind/{destination}?t=<ticket>`; the start cookie is cleared.
/// 4. There the ticket must open for this destination, be in time, and name the nonce of the
///    browser's cookie: the binding cookie is set, the nonce cleared, and the browser goes on.
///
/// A browser that did not start the flow has no start cookie (step 3 refuses); a ticket taken
/// to another browser meets another nonce, or none (step 4 refuses). Over https both cookies
/// carry the `__Host-` prefix, so no sibling host can plant them. Nothing is stored.
package struct WebHandover: Sendable {
    package static let startCookieName = "parley_handover"
    package static let nonceCookieName = "parley_web_nonce"
    /// How long the browser has for the whole hand-over, and for a ticket.
    package static let cookieLifetime = 300
    package static let ticketLifetime: TimeInterval = 60
    /// Sealed tickets and start cookies are a few hundred bytes; anything much longer is not one.
    package static let maxSealedLength = 4096

    package let secrets: Secrets
    package let clock: any WallClock
    /// Parley's own base URL (`PARLEY_PUBLIC_URL`) and the web origin's (`PARLEY_WEB_PUBLIC_URL`).
    package let publicURL: String
    package let webURL: String

    private struct Start: Codable {
        package var destination: String
        package var secret: String
        package var location: String
    }

    private struct Ticket: Codable {
        package var flow: String
        package var secret: String
        package var location: String
        /// SHA-256 of the web origin's nonce, hex.
        package var nonce: String
        package var expires: Double
    }

    /// The start cookie's name on Parley's origin (`__Host-` over https).
    package var startCookie: String { Self.hostPrefixed(Self.startCookieName, url: publicURL) }
    /// The nonce cookie's name on the web origin (`__Host-` over https).
    package var nonceCookie: String { Self.hostPrefixed(Self.nonceCookieName, url: webURL) }

    /// Where a destination's hand-over is answered on the web origin.
    package func bindURL(_ destination: String) -> String { webURL + "/web-bind/" + destination }

    /// Step 1: the start page's answer, on Parley's origin.
    package func start(flow: FlowRecord, secret: String, destination: String, location: String) -> FlowPage {
        let start = Start(destination: destination, secret: secret, location: location)
        let sealed = secrets.keyRing.seal(
            Array((try? JSONEncoder().encode(start)) ?? Data()), associatedData: SealBinding.webHandoverStart(flow.idString))
        let cookie = Self.cookie(startCookie, Hex.encode(sealed), url: publicURL, maxAge: Self.cookieLifetime)
        return .redirect(bindURL(destination) + "?flow=" + flow.idString, cookies: [cookie])
    }

    /// Step 2, on the web origin: a nonce for this browser, then back to Parley's origin.
    package func nonce(flowID: String, destination: String) -> FlowPage {
        guard let id = UUID(uuidString: flowID) else { return .notice(.linkNotValid) }
        let nonce = SecureRandom.token(byteCount: 32)
        let hash = Hex.encode(SHA256.hash(Array(nonce.utf8)))
        let cookie = Self.cookie(nonceCookie, nonce, url: webURL, maxAge: Self.cookieLifetime)
        return .redirect(publicURL + "/flows/" + id.uuidString.lowercased() + "/bind?n=" + hash, cookies: [cookie])
    }

    /// Step 3, on Parley's origin: the browser that started `flow` (its start cookie) gets a
    /// ticket for the nonce it brought. Nil when the cookie does not open for this flow or
    /// does not hold its secret, or the nonce's hash is not one.
    package func ticket(flow: FlowRecord, startCookie value: String?, nonceHash: String?) -> FlowPage? {
        guard let value, value.utf8.count <= Self.maxSealedLength, let sealed = Hex.decode(value),
            let opened = try? secrets.keyRing.open(sealed, associatedData: SealBinding.webHandoverStart(flow.idString)),
            let start = try? JSONDecoder().decode(Start.self, from: Data(opened)),
            flow.isOpened(by: start.secret),
            let nonceHash, Hex.decode(nonceHash)?.count == 32
        else { return nil }
        let ticket = Ticket(
            flow: flow.idString, secret: start.secret, location: start.location, nonce: nonceHash,
            expires: clock.now.timeIntervalSince1970 + Self.ticketLifetime)
        let sealedTicket = secrets.keyRing.seal(
            Array((try? JSONEncoder().encode(ticket)) ?? Data()), associatedData: SealBinding.webHandoverTicket(start.destination))
        return .redirect(
            bindURL(start.destination) + "?t=" + Hex.encode(sealedTicket),
            cookies: [Self.cookie(startCookie, "", url: publicURL, maxAge: 0)])
    }

    /// Step 4, on the web origin: the binding for a ticket made for this destination, in time,
    /// naming this browser's nonce. Nil otherwise.
    package func redeem(ticket value: String, nonce: String?, destination: String, binding: HostedBinding) -> FlowPage? {
        guard value.utf8.count <= Self.maxSealedLength, let sealed = Hex.decode(value),
            let opened = try? secrets.keyRing.open(sealed, associatedData: SealBinding.webHandoverTicket(destination)),
            let ticket = try? JSONDecoder().decode(Ticket.self, from: Data(opened)),
            ticket.expires >= clock.now.timeIntervalSince1970,
            let nonce, !nonce.isEmpty, let expected = Hex.decode(ticket.nonce),
            constantTimeEquals(SHA256.hash(Array(nonce.utf8)), expected)
        else { return nil }
        return .redirect(
            ticket.location,
            cookies: [
                binding.bindingCookie(flowID: ticket.flow, secret: ticket.secret, destination: destination),
                Self.cookie(nonceCookie, "", url: webURL, maxAge: 0),
            ])
    }

    private static func hostPrefixed(_ name: String, url: String) -> String {
        URLParts(url)?.isSecure == true ? "__Host-" + name : name
    }

    /// `Path=/` (which `__Host-` requires), `HttpOnly`, `SameSite=Lax` (sent on the top-level
    /// redirects between the two origins), `Secure` over https.
    private static func cookie(_ name: String, _ value: String, url: String, maxAge: Int) -> String {
        let secure = URLParts(url)?.isSecure == true ? "; Secure" : ""
        return "\(name)=\(value); Path=/; Max-Age=\(maxAge); HttpOnly; SameSite=Lax\(secure)"
    }
}
