import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ParleyCrypto
import ParleyEncoding
import ParleyDomain

/// `ANY /web/{destination}/…`, the hosted upstream's web path: forwards a bound browser's
/// requests through the registration's browser conversation (`UpstreamExchange`) and lets
/// the flow's kind judge each answer.
///
/// An upstream that honours the forwarded headers answers in the browser's address space;
/// its `Location`s are mapped back into its own (`ForwardedAddressSpace`) before a kind
/// looks at them, as its cookies are before they are stored (the browser manager's jar).
struct HostedUpstreamController: Sendable {
    /// Browser requests on the web path are forms and pages, not uploads.
    static let maxBodyBytes: Int64 = 1 << 20

    let binding: HostedBinding
    let flows: FlowService
    let kinds: FlowKinds
    let registrations: any RegistrationRepository
    let conversations: Conversations
    let exchange: UpstreamExchange
    let pages: Pages

    /// `ANY /web/{destination}/…`
    /// Every answer leaves in the web path's box (`WebPathBox`).
    @Sendable func handle(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        WebPathBox.boxed(await pages.guardingResponse(request) { try await forward(request, context: context) })
    }

    private func forward(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        if let refusal = WebPathBox.refusal(request, origin: binding.publicParts?.origin) { return pages.problem(refusal, for: request) }
        let name = context.parameters.get("destination") ?? ""
        guard let destination = conversations.destinations[name] else { return pages.notice(.noSuchService, for: request) }
        let presented = HostedBinding.presented(in: request.headers[values: .cookie])
        if presented == .conflicting { return conflictingBindings(request) }
        guard let (flow, registration, kind) = try await boundFlow(presented, destination: destination) else {
            return pages.notice(.noSignInHere, service: name, for: request)
        }
        switch flow.status {
        case .pending: break
        case .expired: return pages.response(.notice(.expired, service: name, age: PageAge(since: flow.createdAt, now: flows.clock.now)), for: request)
        case .completed, .failed: return finished(flow, destination: destination)
        }
        var outgoing = try exchange.outgoing(request, prefix: "/web/" + name, destination: destination)
        if let parts = binding.publicParts {
            outgoing.headers.set("X-Forwarded-Proto", parts.scheme)
            outgoing.headers.set("X-Forwarded-Host", parts.port.map { "\(parts.host):\($0)" } ?? parts.host)
            outgoing.headers.set("X-Forwarded-Prefix", parts.path + "/web/" + name)
        }
        var body = request.body
        var declaredLength = request.headers[.contentLength].flatMap(Int64.init)
        // A form post the kind reads first (a SAMLResponse on its way to the ACS): read whole
        // (pages' forms are small), judged, then sent on as it came.
        if request.method == .post, kind.readsFormPosts(for: destination),
            request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true
        {
            let bytes = try await request.body.collect(upTo: Int(Self.maxBodyBytes))
            let fields = PercentEncoding.decodeForm(String(buffer: bytes)) ?? []
            if try await kind.formPosted(fields, flow: flow, destination: destination, logger: context.logger) == .ended {
                return finished(flow, destination: destination)
            }
            body = RequestBody(buffer: bytes)
            declaredLength = Int64(bytes.readableBytes)
        }
        let result = try await exchange.send(
            outgoing, body: body, declaredLength: declaredLength, limit: Self.maxBodyBytes,
            through: try conversations.browserManager(for: registration, flow: flow))
        guard case .response(var response) = result else {
            return pages.notice(.cannotHost, service: name, for: request)
        }
        conversations.addressSpace(of: destination)?.mapLocationBack(in: &response)
        switch try await kind.answer(&response, requestURL: outgoing.url, flow: flow, destination: destination, logger: context.logger) {
        case .forward:
            break
        case .complete:
            response.body.discard()
            try await flows.finish(flow, status: .completed, error: nil, logger: context.logger)
            return finished(flow, destination: destination)
        case .ended:
            response.body.discard()
            return finished(flow, destination: destination)
        }
        return try await browserResponse(response, requestURL: outgoing.url, destination: destination, isHead: request.method == .head, ticket: context.inFlight)
    }

    /// The flow this browser is bound to on this destination's path, with its registration
    /// and its kind (a kind that sees the upstream through the web path).
    private func boundFlow(_ presented: HostedBinding.Presented, destination: Destination) async throws
        -> (FlowRecord, RegistrationRecord, any HostedFlowKind)?
    {
        guard case .one(let id, let secret) = presented, let flow = try await flows.current(id),
            flow.isOpened(by: secret), let kind = kinds[flow.kind] as? any HostedFlowKind,
            let registration = try await registrations.find(id: flow.registrationID), registration.destination == destination.name
        else { return nil }
        return (flow, registration, kind)
    }

    /// Two different bindings in one browser (one planted by a page): neither counts, and
    /// every binding this request could carry is removed, so the person can start again.
    private func conflictingBindings(_ request: Request) -> Response {
        var response = pages.notice(.moreThanOneSignIn, for: request)
        let path = String(request.uri.string.prefix { $0 != "?" })
        for cookie in binding.clearingCookies(requestPath: path) { response.headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return response
    }

    /// The end of the flow in this browser: the done page, and the binding removed.
    private func finished(_ flow: FlowRecord, destination: Destination) -> Response {
        var response = Page.redirect(flows.doneURL(flow), status: .seeOther)
        response.headers.append(HTTPField(name: .setCookie, value: binding.clearingCookie(destination: destination.name)))
        return response
    }

    /// The upstream's answer for the browser: its headers minus `Set-Cookie` (kept in the jar)
    /// and hop-by-hop ones, an upstream-origin `Location` mapped into the web path.
    private func browserResponse(_ upstream: UpstreamResponse, requestURL: String, destination: Destination, isHead: Bool, ticket: InFlightTicket?) async throws -> Response {
        var upstream = upstream
        if let location = upstream.headers["Location"], let absolute = URLParts.resolve(location, against: requestURL),
            let mapped = binding.publicLocation(forUpstream: absolute, destination: destination)
        {
            upstream.headers.set("Location", mapped)
        }
        return try await UpstreamAnswer.response(from: upstream, csrf: destination.csrfEnabled, isHead: isHead, ticket: ticket)
    }
}
