import HTTPTypes
import Hummingbird
import ParleyDomain

/// Who may send a request on the hosted upstream's web path (`/web/{destination}/…`) now:
/// the web path's rate limit and its in-flight cap, both per client address (the browser
/// is not known yet: its binding cookie is read after this). Refusals are HTML pages with
/// `Retry-After`, boxed like every other answer there (`WebPathBox`). The in-flight slot travels
/// in the context, as the proxy's does: the upstream's answer holds it until its body is written.
struct HostedUpstreamAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let limits: RateLimits
    let inFlight: InFlightLimits
    let pages: Pages

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let client = limits.client(of: request, peer: context.peerAddress)
        let ticket: InFlightTicket
        do throws(Problem) {
            try limits.check(limits.web, client, kind: "web")
            ticket = try inFlight.admit(key: client)
        } catch {
            return WebPathBox.boxed(pages.problem(error, for: request))
        }
        var context = context
        context.inFlight = ticket
        return try await next(request, context)
    }
}
