import HTTPTypes
import Hummingbird
import ParleyDomain

/// Who may send a request on the hosted upstream's web path (`/web/{destination}/…`) now:
/// the web path's rate limit and its in-flight cap, both per client address (the browser
/// is not known yet: its binding cookie is read after this). Refusals are HTML pages with
/// `Retry-After`, boxed like every other answer there (`WebPathBox`); the in-flight slot is held
/// until the answer's body is written.
struct HostedUpstreamAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let limits: RateLimits
    let inFlight: InFlightLimits
    let pages: Pages

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let client = limits.clientAddress(peer: context.peerAddress, forwardedFor: request.headers[HTTPField.Name("X-Forwarded-For")!])
        let ticket: InFlightTicket
        do throws(Problem) {
            try limits.check(limits.web, client, kind: "web")
            ticket = try inFlight.admit(key: client)
        } catch {
            return WebPathBox.boxed(pages.problem(error, for: request))
        }
        var response = try await next(request, context)
        let body = response.body
        response.body = ResponseBody(contentLength: body.contentLength) { writer in
            defer { ticket.release() }
            try await body.write(writer)
        }
        return response
    }
}
