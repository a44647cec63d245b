import AuthFlows
import Foundation
import Hummingbird
import NIOCore
import ParleyDomain

/// `/healthz`, `/readyz`, `/metrics`: for load balancers and operators; no authentication.
struct OperationsController: Sendable {
    let readiness: any ReadinessProbe
    let metrics: Metrics
    /// Parley's signing keys (`PARLEY_SIGNING_KEYS`), published at `/.well-known/jwks.json`.
    var signingKeys: ParleySigningKeys? = nil
    /// The issuer of Parley's assertions and the entity id of its metadata.
    var publicURL: String = ""
    /// Parley's protected-resource metadata (RFC 9728), serialised once.
    var protectedResourceMetadata: [UInt8] = []

    /// `GET /.well-known/oauth-protected-resource` (RFC 9728): Parley's resource identifier and
    /// the authorization servers (the listed identity providers) whose access tokens it takes.
    @Sendable func protectedResource(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "max-age=300"],
            body: .init(byteBuffer: ByteBuffer(bytes: protectedResourceMetadata)))
    }

    /// `GET /.well-known/saml-metadata.xml`: the certificates of the signing keys that have one,
    /// as SAML 2.0 metadata whose entity id is the issuer of Parley's assertions (`PARLEY_PUBLIC_URL`).
    /// `404` when no key has a certificate.
    @Sendable func samlMetadata(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        guard let metadata = signingKeys?.samlMetadata(entityID: publicURL) else {
            return Problem.notFound("no signing key of Parley's (PARLEY_SIGNING_KEYS) has a certificate").render()
        }
        return Response(
            status: .ok, headers: [.contentType: "application/samlmetadata+xml", .cacheControl: "max-age=300"],
            body: .init(byteBuffer: ByteBuffer(string: metadata)))
    }

    /// `GET /.well-known/jwks.json`: the public half of every signing key, so that an
    /// authorization server trusts Parley's assertions, before and after a rotation. `404`
    /// when Parley has none.
    @Sendable func jwks(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        guard let signingKeys else { return Problem.notFound("Parley has no signing keys (PARLEY_SIGNING_KEYS)").render() }
        return Response(
            status: .ok, headers: [.contentType: "application/jwk-set+json", .cacheControl: "max-age=300"],
            body: .init(byteBuffer: ByteBuffer(bytes: signingKeys.jwks)))
    }

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

    /// The document's validator: `no-cache` asks a cache to revalidate, which needs one.
    /// FNV-1a (64 bits) of the document compiled into this binary: it changes with the document.
    static let openAPIETag: String = {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in EmbeddedOpenAPI.json.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "\"" + String(repeating: "0", count: 16 - hex.count) + hex + "\""
    }()

    /// The OpenAPI 3.1 description of the thin-client and administration APIs; `304` when the
    /// request's `If-None-Match` names the current document.
    @Sendable func openAPI(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        let tag = Self.openAPIETag
        let matches = request.headers[values: .ifNoneMatch].contains { field in
            field.split(separator: ",").contains { candidate in
                let trimmed = candidate.trimmingCharacters(in: .whitespaces)
                return trimmed == "*" || trimmed == tag || trimmed == "W/" + tag
            }
        }
        if matches {
            return Response(status: .notModified, headers: [.eTag: tag, .cacheControl: "no-cache"])
        }
        return Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-cache", .eTag: tag],
            body: .init(byteBuffer: ByteBuffer(string: EmbeddedOpenAPI.json)))
    }

    /// A live reading: no cache may keep it.
    @Sendable func metricsText(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
    }
}
