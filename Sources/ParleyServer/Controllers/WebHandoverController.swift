import Foundation
import HTTPTypes
import Hummingbird
import ParleyDomain

/// The hand-over of a browser to the web origin (`WebHandover`), when the hosted upstream has
/// an origin of its own: `GET /web-bind/{destination}` on the web origin (steps 2 and 4) and
/// `GET /flows/{id}/bind` on Parley's (step 3). Every refusal is a page that sends the person
/// back to the app; nothing is forwarded anywhere.
struct WebHandoverController: Sendable {
    let handover: WebHandover
    let binding: HostedBinding
    let flows: FlowService
    let conversations: Conversations
    let pages: Pages

    /// `GET /web-bind/{destination}?flow={id}` (a nonce, then to Parley's origin) or `?t={ticket}`
    /// (the binding, then to the upstream's page), on the web origin.
    @Sendable func bind(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await pages.guarding(request) {
            let destination = context.parameters.get("destination") ?? ""
            guard conversations.destinations[destination] != nil else { return .notice(.noSuchService) }
            if let ticket = request.uri.queryParameters.get("t") {
                let nonce = request.cookies[handover.nonceCookie]?.value
                guard let page = handover.redeem(ticket: ticket, nonce: nonce, destination: destination, binding: binding) else {
                    context.logger.info("web hand-over refused: the ticket is not this browser's, or too old")
                    return .notice(.notThisBrowser, service: destination)
                }
                return page
            }
            return handover.nonce(flowID: request.uri.queryParameters.get("flow") ?? "", destination: destination)
        }
    }

    /// `GET /flows/{id}/bind?n={nonce hash}`, on Parley's origin: the ticket, for the browser that
    /// started the flow.
    @Sendable func ticket(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        await pages.guarding(request) {
            guard let id = UUID(uuidString: context.parameters.get("id") ?? ""), let flow = try await flows.current(id) else {
                return .notice(.linkNotValid)
            }
            guard flow.status == .pending else { return flows.done(flow) }
            let start = request.cookies[handover.startCookie]?.value
            guard let page = handover.ticket(flow: flow, startCookie: start, nonceHash: request.uri.queryParameters.get("n")) else {
                context.logger.info("web hand-over refused: the flow was not started in this browser", metadata: ["flow.id": .string(flow.idString)])
                return .notice(.notThisBrowser)
            }
            return page
        }
    }
}
