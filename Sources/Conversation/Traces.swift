import Tracing

/// Writes W3C trace context (`traceparent`, `tracestate`) into an upstream request's headers.
struct HeaderFieldsInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HeaderFields) {
        carrier.set(key, value)
    }
}

/// The spans a conversation opens (docs/operations.md "Traces"). Attributes name the method,
/// host, status and attempt: never a path, a query, a header or a credential.
enum ExchangeTrace {
    static let spanName = "upstream exchange"
    static let restartEvent = "conversation restart"

    /// A child of the current span (the thin-client request); the no-op tracer's span when traces are off.
    static func start(_ request: UpstreamRequest, attempt: Int) -> any Span {
        let span = startSpan(spanName, ofKind: .client)
        guard span.isRecording else { return span }
        span.updateAttributes { attributes in
            attributes["http.request.method"] = request.method
            if let parts = URLParts(request.url) {
                attributes["server.address"] = parts.host
                if let port = parts.port { attributes["server.port"] = port }
            }
            attributes["parley.attempt"] = attempt
        }
        return span
    }

    static func received(_ status: Int, on span: any Span) {
        guard span.isRecording else { return }
        span.attributes["http.response.status_code"] = status
        if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
    }

    static func restarting(_ reason: String, count: Int, on span: any Span) {
        guard span.isRecording else { return }
        span.addEvent(SpanEvent(name: restartEvent, attributes: ["parley.restart.reason": .string(reason), "parley.restart.count": .int64(Int64(count))]))
    }

    /// Adds `traceparent`/`tracestate` for this exchange's span (only for destinations that allow it).
    static func inject(_ span: any Span, into headers: inout HeaderFields) {
        guard span.isRecording else { return }
        InstrumentationSystem.instrument.inject(span.context, into: &headers, using: HeaderFieldsInjector())
    }
}
