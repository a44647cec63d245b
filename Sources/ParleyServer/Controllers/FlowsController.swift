import Foundation
import Hummingbird
import ParleyDomain

/// Who may start a flow now (`POST /v1/flows`): the flows rate limit and in-flight cap,
/// both per registration. Every flow is a database row and an audit event, so a client
/// cannot make them as fast as it can send.
struct FlowAdmission: RouterMiddleware {
    typealias Context = ClientRequestContext
    let limits: RateLimits
    let inFlight: InFlightLimits

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let key = context.registration.idString
        try limits.check(limits.flows, key, kind: "flow")
        let ticket = try inFlight.admit(key: key)
        defer { ticket.release() }
        return try await next(request, context)
    }
}

/// `POST /v1/flows` and `GET /v1/flows/{id}?wait=S`: a registration's own flows.
struct FlowsController: Sendable {
    struct StartFlow: Decodable { var kind: String? }

    let flows: FlowService
    let kinds: FlowKinds
    let conversations: Conversations
    let maxJSONBytes: Int

    /// Proactive login. Without `kind`, the first kind the destination offers, in the order
    /// the kinds are registered (saml2, oauth2 authorization code, basic form).
    @Sendable func create(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let input = try await JSONBody.decode(StartFlow.self, from: request, limit: maxJSONBytes)
        let destination = try conversations.destination(of: try context.approvedRegistration())
        let offered = kinds.offered(by: destination)
        let kind: FlowKind
        if let requested = input.kind {
            guard let k = kinds.kind(named: requested), offered.contains(k) else {
                throw Problem.invalid("this destination offers no '\(requested.prefix(32))' flow")
            }
            kind = k
        } else {
            guard let first = offered.first else { throw Problem.invalid("this destination has no interactive login") }
            kind = first
        }
        let (flow, url) = try await flows.create(
            for: context.registration, kind: kind, scopeKey: kinds[kind]?.scopeKey(for: destination))
        var response = try JSONBody.response(.created, flows.view(flow, url: url))
        // Where the new flow is read (RFC 9110 §15.3.2), relative to this request's URI.
        response.headers[.location] = "flows/\(flow.id.uuidString.lowercased())"
        return response
    }

    @Sendable func status(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let view = try await flows.status(
            id: context.parameters.get("id").flatMap { UUID(uuidString: String($0)) }, wait: LongPoll.seconds(request.waitParameter),
            registration: context.registration)
        return try JSONBody.response(.ok, view)
    }
}
