import Hummingbird
import NIOCore

/// `/healthz`, `/readyz`, `/metrics`: for load balancers and operators; no authentication.
struct OperationsController: Sendable {
    let readiness: any ReadinessProbe
    let metrics: Metrics

    /// `{"status": "ok"}` and `{"status": "ready"}`.
    struct Status: Encodable, Sendable {
        let status: String
    }

    @Sendable func health(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        try JSONBody.response(.ok, Status(status: "ok"))
    }

    @Sendable func ready(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        guard await readiness.isReady() else { return Problem.storeUnavailable().render() }
        return try JSONBody.response(.ok, Status(status: "ready"))
    }

    /// The OpenAPI 3.1 description of the thin-client and administration APIs.
    @Sendable func openAPI(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-cache"],
            body: .init(byteBuffer: ByteBuffer(string: EmbeddedOpenAPI.json)))
    }

    @Sendable func metricsText(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
    }
}
