import Foundation
import Hummingbird
import ParleyCrypto
import ParleyEncoding

/// The hosted pages every flow shares: `GET /flows/{id}?k=…` (checks the secret, then
/// the flow's kind takes the browser on) and `GET /flows/{id}/done`.
struct FlowPagesController: Sendable {
    let flows: FlowService
    let kinds: FlowKinds
    let registrations: any RegistrationRepository
    let conversations: Conversations

    @Sendable func start(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await Page.guarding {
            let access = try await flows.browserAccess(id: context.parameters.get("id"), secret: request.uri.queryParameters.get("k"))
            guard case .pending(let flow) = access, let secret = request.uri.queryParameters.get("k") else {
                if case .answered(let page) = access { return page }
                return Page.problem(.notFound("no such sign-in, or the link is not valid"))
            }
            guard let handler = kinds[flow.kind], let registration = try await registrations.find(id: flow.registrationID),
                let destination = try? conversations.destination(of: registration)
            else { return Page.problem(Problem(.notFound, .notFound, "this flow cannot be started here")) }
            return try await handler.start(flow, secret: secret, registration: registration, destination: destination)
        }
    }

    /// The end page; with an allowed `returnUrl`, a `303` back to the app.
    @Sendable func done(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await Page.guarding {
            guard let uuid = UUID(uuidString: context.parameters.get("id") ?? ""), let flow = try await flows.current(uuid) else {
                return Page.problem(.notFound("no such flow"))
            }
            if flow.status != .pending, let returnUrl = flow.returnUrl, let registration = try await registrations.find(id: flow.registrationID),
                (try? conversations.destination(of: registration))?.allowsReturnURL(returnUrl) == true
            {
                let separator = returnUrl.contains("?") ? "&" : "?"
                let query = PercentEncoding.encodeForm([("flow", flow.idString), ("status", flow.status.rawValue)])
                return Page.redirect(returnUrl + separator + query, status: .seeOther)
            }
            let (status, title, message): (HTTPResponse.Status, String, String) =
                switch flow.status {
                case .completed: (.ok, "Signed in", "You are signed in. You can close this page and return to the app.")
                case .failed: (.forbidden, "Sign-in failed", "The sign-in did not succeed. Return to the app and try again.")
                case .expired: (.gone, "Sign-in expired", "This sign-in link has expired. Return to the app and start again.")
                case .pending: (.ok, "Sign-in in progress", "The sign-in has not finished yet.")
                }
            return Page.html(status, title: title, message: message, attributes: ["data-parley-flow-status": flow.status.rawValue])
        }
    }
}
