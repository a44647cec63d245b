import Foundation
import Hummingbird
import Logging
import ParleyCrypto

/// Outermost middleware: request id, header-size limit, problem+json for every
/// error, access log and metrics. Logs carry the route and status, never the
/// query string or a header value.
struct ParleyMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: Metrics
    static var maxHeaderBytes: Int { 32 * 1024 }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        let requestID = Hex.encode(SecureRandom.bytes(8))
        var context = context
        context.logger[metadataKey: "request.id"] = .string(requestID)
        let route = Self.route(of: request)
        var response: Response
        do {
            var headerBytes = request.uri.string.utf8.count
            for field in request.headers { headerBytes += field.name.rawName.utf8.count + field.value.utf8.count + 4 }
            if headerBytes > Self.maxHeaderBytes {
                throw Problem(.requestHeaderFieldsTooLarge, .headersTooLarge, "request headers are larger than 32 KiB")
            }
            response = try await next(request, context)
        } catch {
            let problem = Problem.from(error)
            if problem.status.code >= 500 {
                context.logger.warning(
                    "request failed", metadata: ["problem.code": .string(problem.code.rawValue), "error": "\(error)", "http.route": .string(route)])
            }
            response = problem.render()
        }
        response.headers[.init("Parley-Request-Id")!] = requestID
        let elapsed = (ContinuousClock.now - started).components
        let seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        metrics.increment("parley_http_requests_total", [("route", route), ("status", Metrics.statusClass(Int(response.status.code)))])
        metrics.observe(route: route, seconds: seconds)
        context.logger.info(
            "request", metadata: ["http.method": .string(request.method.rawValue), "http.route": .string(route), "http.status": "\(response.status.code)",
                "duration.ms": .string(String(format: "%.2f", seconds * 1000))])
        return response
    }

    /// A fixed route label (no ids, no query) for logs and metrics.
    static func route(of request: Request) -> String {
        let path = request.uri.path
        if path.hasPrefix("/v1/proxy") { return "/v1/proxy" }
        if path.hasPrefix("/v1/flows/") { return "/v1/flows/{id}" }
        if path.hasPrefix("/flows/") { return "/flows/{id}" }
        if path.hasPrefix("/admin/v1/registrations/") { return "/admin/v1/registrations/{id}" }
        switch path {
        case "/healthz", "/readyz", "/metrics", "/v1/registrations", "/v1/registrations/me", "/v1/flows", "/callback/oauth2", "/callback/otp",
            "/admin/v1/registrations", "/admin/v1/revocations", "/admin/v1/audit":
            return path
        default:
            return "other"
        }
    }
}

/// Routes `/v1/proxy/…` before the router sees it, so the raw request target
/// (with its encoded segments) is what the path rules judge.
struct ProxyMiddleware<Context: RequestContext>: RouterMiddleware {
    let parley: Parley

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.string
        guard path == "/v1/proxy" || path.hasPrefix("/v1/proxy/") || path.hasPrefix("/v1/proxy?") else {
            return try await next(request, context)
        }
        return try await parley.proxy(request, context: context)
    }
}
