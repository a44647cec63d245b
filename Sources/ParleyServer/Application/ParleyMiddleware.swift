import Conversation
import Hummingbird
import Logging
import ParleyCrypto
import ParleyEncoding
import Synchronization
import ParleyDomain

/// Outermost middleware: request id, header-size limit, `405` for a known path with
/// another method, problem+json for every error, access log and metrics. Logs carry
/// the route template and status, never the query string or a header value.
struct ParleyMiddleware: RouterMiddleware {
    typealias Context = ParleyRequestContext
    static let maxHeaderBytes = 32 * 1024

    let metrics: Metrics
    let routes: RouteTable

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        let requestID = LocalID.next()
        var context = context
        context.logger[metadataKey: "request.id"] = .string(requestID)
        var response: Response
        do {
            var headerBytes = request.uri.string.utf8.count
            for field in request.headers { headerBytes += field.name.rawName.utf8.count + field.value.utf8.count + 4 }
            if headerBytes > Self.maxHeaderBytes {
                throw Problem(.requestHeaderFieldsTooLarge, .headersTooLarge, "request headers are larger than 32 KiB")
            }
            response = try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound && context.endpointPath == "NotFound" {
            // The router found no route for this method: 405 when the path exists with others.
            let allowed = routes.methods(forPath: request.uri.path)
            response = (allowed.isEmpty ? Problem.notFound() : Problem.methodNotAllowed(allowed: allowed)).render()
        } catch is CancellationError {
            // The client went away or the instance is stopping: nobody is failing here.
            context.logger.debug("request cancelled", metadata: ["http.route": .string(route(context))])
            var problem = Problem(.serviceUnavailable, .upstreamUnavailable, "the request was cancelled (the instance is stopping)")
            problem.headers[.retryAfter] = "1"
            response = problem.render()
        } catch {
            let problem = Problem.from(error)
            if problem.status.code >= 500 {
                context.logger.warning(
                    "request failed",
                    metadata: ["problem.code": .string(problem.code.rawValue), "error": "\(error)", "http.route": .string(route(context))])
            }
            response = problem.render()
        }
        response.headers[.parleyRequestID] = requestID
        let elapsed = ContinuousClock.now - started
        let route = route(context)
        metrics.increment(.httpRequests, [("route", route), ("status", Metrics.statusClass(Int(response.status.code)))])
        metrics.observe(route: route, duration: elapsed)
        if context.logger.logLevel <= .info {
            context.logger.info(
                "request",
                metadata: [
                    "http.method": .string(request.method.rawValue), "http.route": .string(route), "http.status": "\(response.status.code)",
                    "duration.ms": .string(Self.milliseconds(elapsed)),
                ])
        }
        return response
    }

    /// The matched route template (no ids, no query), or `other` for unknown paths.
    private func route(_ context: Context) -> String {
        guard let path = context.endpointPath, path != "NotFound" else { return "other" }
        return path
    }

    static func milliseconds(_ duration: Duration) -> String {
        let micros = duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000
        let fraction = micros % 1000
        return "\(micros / 1000)." + (fraction < 10 ? "00" : fraction < 100 ? "0" : "") + "\(fraction)"
    }
}

/// Every route the router serves (path template and methods), to tell `404` from `405`.
/// Filled once, after the routes are added and before the server starts.
final class RouteTable: Sendable {
    struct Route: Sendable {
        let components: [Substring]
        let method: String
    }

    private let routes = Mutex<[Route]>([])

    func install(_ described: [(path: String, method: String)]) {
        routes.withLock { $0 = described.map { Route(components: $0.path.split(separator: "/"), method: $0.method) } }
    }

    /// The methods served at a concrete path, in a stable order.
    func methods(forPath path: String) -> [String] {
        let parts = path.split(separator: "/")
        var found = Set<String>()
        for route in routes.withLock({ $0 }) where Self.matches(route.components, parts) { found.insert(route.method) }
        return found.sorted()
    }

    static func matches(_ template: [Substring], _ parts: [Substring]) -> Bool {
        var i = 0
        for component in template {
            if component == "**" { return i < parts.count }
            guard i < parts.count else { return false }
            if !(component.hasPrefix("{") && component.hasSuffix("}")) && component != "*" && component != parts[i] { return false }
            i += 1
        }
        return i == parts.count
    }
}
