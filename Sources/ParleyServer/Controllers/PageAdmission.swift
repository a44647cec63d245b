import HTTPTypes
import Hummingbird
import ParleyDomain

/// Who may open Parley's own pages and callbacks now (`/flows/…`, `/callback/…`,
/// `/backchannel-logout`): nobody has authenticated there, and every request costs a database
/// query, so each client address has a rate limit (`PARLEY_RATE_LIMIT_PAGES`, shared out among
/// the instances like every limit). A refusal is an HTML page with `Retry-After` where a browser
/// is reading, and problem+json where a server is (the identity provider's back-channel logout).
struct PageAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let limits: RateLimits
    let pages: Pages
    var answersWithPages = true

    /// The same limit, refusing with problem+json.
    var answeringJSON: PageAdmission {
        var copy = self
        copy.answersWithPages = false
        return copy
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let client = limits.client(of: request, peer: context.peerAddress)
        do throws(Problem) {
            try limits.check(limits.pages, client, kind: "pages")
        } catch {
            guard answersWithPages else { throw error }
            return pages.problem(error, for: request)
        }
        return try await next(request, context)
    }
}
