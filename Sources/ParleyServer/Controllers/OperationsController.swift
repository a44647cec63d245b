import Hummingbird
import NIOCore

/// `/healthz`, `/readyz`, `/metrics`: for load balancers and operators; no authentication.
struct OperationsController: Sendable {
    let readiness: any ReadinessProbe
    let metrics: Metrics

    @Sendable func health(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        JSONBody.response(.ok, .object(["status": .string("ok")]))
    }

    @Sendable func ready(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        guard await readiness.isReady() else { return Problem.storeUnavailable().render() }
        return JSONBody.response(.ok, .object(["status": .string("ready")]))
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
