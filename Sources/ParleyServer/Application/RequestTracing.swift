import Hummingbird
import Synchronization
import Tracing
import ParleyDomain

/// One span per thin-client request (docs/operations.md "Traces"), the root of everything the
/// request does: upstream exchanges, token-endpoint calls, flow steps and store calls are its
/// children. Named by the route template (`GET /v1/proxy/**`), never by the raw path; its
/// attributes carry no query, header or token. Trace context a client sends is not trusted
/// (a request always starts its own trace). Added only when traces are on.
struct RequestTracingMiddleware: RouterMiddleware {
    typealias Context = ParleyRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let span = startSpan("HTTP \(request.method.rawValue)", context: .topLevel, ofKind: .server)
        span.attributes["http.request.method"] = request.method.rawValue
        do {
            var response = try await ServiceContext.$current.withValue(span.context) {
                try await next(request, context)
            }
            finish(span, route: context.endpointPath, method: request.method.rawValue, status: Int(response.status.code))
            // The span ends once the body (a proxied stream) is written.
            let ending = SpanEnding(span)
            let body = response.body
            response.body = ResponseBody(contentLength: body.contentLength) { writer in
                defer { ending.end() }
                try await body.write(writer)
            }
            return response
        } catch {
            finish(span, route: context.endpointPath, method: request.method.rawValue, status: Int(Problem.from(error).status.code))
            span.recordError(error)
            span.end()
            throw error
        }
    }

    private func finish(_ span: any Span, route: String?, method: String, status: Int) {
        let template = route.flatMap { $0 == "NotFound" ? nil : $0 } ?? "other"
        span.operationName = "\(method) \(template)"
        span.attributes["http.route"] = template
        span.attributes["http.response.status_code"] = status
        if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
    }
}

/// Ends a span once: from the body writer's closure, or when the response is dropped unwritten.
private final class SpanEnding: Sendable {
    private let span: Mutex<(any Span)?>
    init(_ span: any Span) { self.span = Mutex(span) }
    func end() { span.withLock { $0.take() }?.end() }
    deinit { end() }
}

/// Whether a tracer other than the no-op one is bootstrapped (the `parley` binary does it when traces are on).
var tracesAreOn: Bool { !(InstrumentationSystem.tracer is NoOpTracer) }
