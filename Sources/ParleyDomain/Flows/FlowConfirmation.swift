package import AuthFlows
package import Conversation
import Foundation
import ParleyCrypto
import ParleyEncoding

extension RegistrationRecord {
    /// Whether an identity token vouched for the registration's user (`user.verified`). Only
    /// such registrations skip the confirmation page and the OAuth2 `prompt=login`.
    package var hasVerifiedUser: Bool { user?.verified == true }
}

extension SealBinding {
    /// A confirmation page's token: its nonce, bound to the flow. Never stored, so `parley rekey`
    /// has nothing to re-seal; any key of the ring opens it.
    package static func flowConfirmation(_ id: String) -> String { "flows.confirmation:\(id)" }
}

/// The confirmation page: for a registration without a verified user, the flow URL shows who
/// asked for the sign-in before anything leaves Parley, and only its button's `POST` continues
/// the flow as the start page did before (the kind's `start`). Whoever sends a victim a flow URL
/// of their own registration gets no sign-in without the victim reading the page and choosing it.
///
/// The button's `POST` carries the flow's secret and a per-page token: a fresh random nonce goes
/// to this browser in a cookie (`parley_confirm`, `HttpOnly`, `SameSite=Strict`, scoped to this
/// flow's confirmation path), and the form carries the nonce sealed under the key ring, bound to
/// the flow. The post is accepted when the token opens for this flow and holds the nonce the
/// browser's cookie holds: another site can neither read the page's token nor make the browser
/// send the cookie with its own post, and a token of one flow or page is worth nothing for another.
package struct FlowConfirmation: Sendable {
    package static let cookieName = "parley_confirm"
    /// A sealed 43-byte nonce in hex is under 200 characters; anything much longer is not a token.
    package static let maxTokenLength = 512

    package let secrets: Secrets
    package let clock: any WallClock
    package let publicURL: String

    /// Whether the flow URL of this registration shows the confirmation page first.
    package func isNeeded(for registration: RegistrationRecord) -> Bool { !registration.hasVerifiedUser }

    /// Where the page's form posts (under the public URL's path prefix).
    package func action(_ flow: FlowRecord) -> String { (URLParts(publicURL)?.path ?? "") + "/flows/\(flow.idString)/confirm" }

    /// The page for one opening of the flow URL: a fresh token, and its nonce in the cookie.
    package func page(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) -> FlowPage {
        let nonce = SecureRandom.token(byteCount: 32)
        let token = Hex.encode(secrets.keyRing.seal(nonce, associatedData: SealBinding.flowConfirmation(flow.idString)))
        let lifetime = max(0, Int(flow.expiresAt.timeIntervalSince(clock.now).rounded(.up)))
        let site = URLParts(publicURL)?.isSecure == true ? "; Secure" : ""
        let cookie = "\(Self.cookieName)=\(nonce); Path=\(action(flow)); Max-Age=\(lifetime); HttpOnly; SameSite=Strict\(site)"
        let page = ConfirmationPage(
            service: destination.name, kind: flow.kind.rawValue, requester: PageRequester(registration, destination: destination),
            age: PageAge(since: flow.createdAt, now: clock.now), action: action(flow), secret: secret, token: token)
        return .confirmation(page, cookies: [cookie])
    }

    /// Whether a post's token was made for this flow and holds the nonce of the browser's cookie.
    package func accepts(token: String?, cookie: String?, flow: FlowRecord) -> Bool {
        guard let token, token.utf8.count <= Self.maxTokenLength, let sealed = Hex.decode(token), let cookie, !cookie.isEmpty,
            let nonce = try? secrets.keyRing.openString(sealed, associatedData: SealBinding.flowConfirmation(flow.idString))
        else { return false }
        return constantTimeEquals(Array(nonce.utf8), Array(cookie.utf8))
    }

    package init(secrets: Secrets, clock: any WallClock, publicURL: String) {
        self.secrets = secrets
        self.clock = clock
        self.publicURL = publicURL
    }
}

/// What the confirmation page shows and posts; every value is escaped by the template engine.
package struct ConfirmationPage: Sendable, Equatable {
    /// The destination's name (the page shows its `displayName`).
    package let service: String
    package let kind: String
    package let requester: PageRequester
    /// How long ago the flow started.
    package let age: PageAge
    package let action: String
    package let secret: String
    package let token: String
}
