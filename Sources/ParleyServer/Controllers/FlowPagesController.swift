import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import ParleyCrypto
import ParleyEncoding
import ParleyDomain

/// The hosted pages every flow shares: `GET /flows/{id}?k=…` (checks the secret; then the
/// confirmation page for a registration without a verified user, whose `POST /flows/{id}/confirm`
/// lets the flow's kind take the browser on, as it does at once for a verified user) and
/// `GET /flows/{id}/done`; and the HTTP side of every kind's own routes: their input decoded
/// (`FlowInput`), their `FlowPage` rendered.
struct FlowPagesController: Sendable {
    /// A kind's form post or callback carries a few short fields, never more than this.
    static let maxFormBytes = 16 * 1024

    let flows: FlowService
    let kinds: FlowKinds
    let registrations: any RegistrationRepository
    let conversations: Conversations
    let confirmation: FlowConfirmation
    let pages: Pages
    /// Parley's own origin: a `sameOriginForm` post must come from it.
    let publicOrigin: String?
    /// The client's address from the peer and `X-Forwarded-For` (`RateLimits.clientAddress`).
    let clientAddress: @Sendable (_ peer: String?, _ forwardedFor: String?) -> String
    /// Browser apps' sessions: a browser registration's flow goes on only in the browser that
    /// holds its cookie (and there without a confirmation page).
    var session: BrowserSession? = nil
    var clientTokens: ClientTokens? = nil

    @Sendable func start(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await pages.guarding(request) {
            let access = try await flows.browserAccess(id: context.parameters.get("id"), secret: request.uri.queryParameters.get("k"))
            guard case .pending(let flow) = access, let secret = request.uri.queryParameters.get("k") else {
                if case .answered(let page) = access { return page }
                return .notice(.linkNotValid)
            }
            guard let handler = kinds[flow.kind], let registration = try await registrations.find(id: flow.registrationID),
                let destination = try? conversations.destination(of: registration)
            else { return .notice(.cannotStart) }
            if registration.browserApp != nil {
                // A browser app's flow: only in the browser that holds the registration's cookie,
                // which is the person who started it; nothing leaves Parley for any other.
                guard try await holdsSession(request, of: registration) else { return .notice(.notThisBrowser) }
                return try await handler.start(flow, secret: secret, registration: registration, destination: destination)
            }
            // Nothing leaves Parley on a GET of the flow URL until a person confirms: for a
            // registration without a verified user, and for one whose flow of this kind cannot
            // say who signed in (then the identity binding cannot protect it).
            if confirmation.isNeeded(for: registration) || !handler.yieldsIdentity(for: destination) {
                return confirmation.page(flow, secret: secret, registration: registration, destination: destination)
            }
            return try await handler.start(flow, secret: secret, registration: registration, destination: destination)
        }
    }

    /// `POST /flows/{id}/confirm`: the confirmation page's button. Only from Parley's own page,
    /// with the flow's secret and the page's token (which must match this browser's cookie);
    /// then the flow goes on as its start page goes for a verified user.
    @Sendable func confirm(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await pages.guarding(request) {
            guard Self.isSameOrigin(request, publicOrigin: publicOrigin) else { return .notice(.formFromOtherPage) }
            let body = try await request.body.collect(upTo: Self.maxFormBytes)
            let input = FlowInput(id: context.parameters.get("id"), fields: PercentEncoding.decodeForm(String(buffer: body)) ?? [])
            let access = try await flows.browserAccess(id: input.id, secret: input.value("k"))
            guard case .pending(let flow) = access, let secret = input.value("k") else {
                if case .answered(let page) = access { return page }
                return .notice(.linkNotValid)
            }
            let cookie = request.cookies[FlowConfirmation.cookieName]?.value
            guard confirmation.accepts(token: input.value("token"), cookie: cookie, flow: flow) else {
                context.logger.info("flow confirmation refused: no valid page token", metadata: ["flow.id": .string(flow.idString)])
                return .notice(.confirmationNotValid)
            }
            guard let handler = kinds[flow.kind], let registration = try await registrations.find(id: flow.registrationID),
                let destination = try? conversations.destination(of: registration)
            else { return .notice(.cannotStart) }
            if registration.browserApp != nil, try await !holdsSession(request, of: registration) { return .notice(.notThisBrowser) }
            return try await handler.start(flow, secret: secret, registration: registration, destination: destination).answeringPost
        }
    }

    /// The end page; with an allowed `returnUrl`, a `303` back to the app.
    @Sendable func done(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await pages.guarding(request) {
            guard let uuid = UUID(uuidString: context.parameters.get("id") ?? ""), let flow = try await flows.current(uuid) else {
                return .notice(.linkNotValid)
            }
            let registration = try await registrations.find(id: flow.registrationID)
            let destination = registration.flatMap { try? conversations.destination(of: $0) }
            let app = session?.apps.named(registration?.browserApp)
            if flow.status != .pending, let returnUrl = flow.returnUrl,
                app.map({ $0.allowsReturnURL(returnUrl) }) ?? (destination?.allowsReturnURL(returnUrl) == true)
            {
                let separator = returnUrl.contains("?") ? "&" : "?"
                let query = PercentEncoding.encodeForm([("flow", flow.idString), ("status", flow.status.rawValue)])
                return .redirect(returnUrl + separator + query)
            }
            return .finished(
                FinishedPage(
                    service: destination?.name, status: flow.status, reason: flow.error, age: PageAge(since: flow.createdAt, now: flows.clock.now),
                    requester: registration.map { PageRequester($0, destination: destination) }))
        }
    }

    /// The handler that serves a kind's route: refuses a `sameOriginForm` post from another
    /// site, decodes the query (and a `POST`'s form body), and renders what the kind answers.
    func handler(for route: FlowRoute) -> @Sendable (Request, ParleyRequestContext) async throws -> Response {
        { [publicOrigin, clientAddress, pages] request, context in
            await pages.guarding(request) {
                if route.sameOriginForm && !Self.isSameOrigin(request, publicOrigin: publicOrigin) { return .notice(.formFromOtherPage) }
                var fields = PercentEncoding.decodeForm(request.uri.query ?? "") ?? []
                if request.method == .post {
                    let body = try await request.body.collect(upTo: Self.maxFormBytes)
                    fields += PercentEncoding.decodeForm(String(buffer: body)) ?? []
                }
                let client = clientAddress(context.peerAddress, request.headers[.xForwardedFor])
                return try await route.handler(FlowInput(id: context.parameters.get("id"), fields: fields, client: client), context.logger)
            }
        }
    }

    /// Whether the request carries the session cookie of `registration` (a browser app's).
    private func holdsSession(_ request: Request, of registration: RegistrationRecord) async throws -> Bool {
        guard let session, let clientTokens, let token = session.token(in: request) else { return false }
        return try await clientTokens.registration(token: token, cached: false)?.id == registration.id
    }

    /// Whether a form post comes from Parley's own page (`RequestSite`, the rule the web path shares).
    static func isSameOrigin(_ request: Request, publicOrigin: String?) -> Bool {
        RequestSite.isSameOrigin(request.headers, origin: publicOrigin)
    }
}
