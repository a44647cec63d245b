public import Hummingbird
import Foundation
public import ParleyDomain

/// An error answered as `application/problem+json` (RFC 9457) with a stable `code`.
/// `detail` is written for the client and never carries a secret.
public struct Problem: HTTPResponseError, Sendable {
    public enum Code: String, Sendable {
        case invalidRequest = "invalid_request"
        case invalidClientToken = "invalid_client_token"
        case invalidAdminToken = "invalid_admin_token"
        case invalidIdentityToken = "invalid_identity_token"
        case forbidden
        case notFound = "not_found"
        case interactionRequired = "interaction_required"
        case upstreamUnauthorized = "upstream_unauthorized"
        case flowFailed = "flow_failed"
        case flowExpired = "flow_expired"
        case upstreamUnavailable = "upstream_unavailable"
        case upstreamTimeout = "upstream_timeout"
        case storeUnavailable = "store_unavailable"
        case rateLimited = "rate_limited"
        case payloadTooLarge = "payload_too_large"
        case headersTooLarge = "headers_too_large"
        case methodNotAllowed = "method_not_allowed"
        case internalError = "internal_error"
    }

    public let status: HTTPResponse.Status
    public let code: Code
    public let detail: String
    public var headers: HTTPFields = [:]
    /// Extra members of the problem object (the `flow` of `interaction_required`).
    public var extra: [String: JSONValue] = [:]

    public init(_ status: HTTPResponse.Status, _ code: Code, _ detail: String) {
        self.status = status
        self.code = code
        self.detail = detail
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        render()
    }

    public func render() -> Response {
        var object: [String: JSONValue] = [
            "type": .string("https://parley.dev/problems/\(code.rawValue)"),
            "title": .string(title),
            "status": .number(Double(status.code)),
            "detail": .string(detail),
            "code": .string(code.rawValue),
        ]
        for (key, value) in extra { object[key] = value }
        var headers = self.headers
        headers[.contentType] = "application/problem+json"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: JSONValue.object(object).encoded())))
    }

    var title: String {
        switch code {
        case .invalidRequest: "Invalid request"
        case .invalidClientToken: "Invalid client token"
        case .invalidAdminToken: "Invalid admin token"
        case .invalidIdentityToken: "Invalid identity token"
        case .forbidden: "Forbidden"
        case .notFound: "Not found"
        case .interactionRequired: "Interaction required"
        case .upstreamUnauthorized: "Upstream refused the credentials"
        case .flowFailed: "Flow failed"
        case .flowExpired: "Flow expired"
        case .upstreamUnavailable: "Upstream unavailable"
        case .upstreamTimeout: "Upstream timeout"
        case .storeUnavailable: "Store unavailable"
        case .rateLimited: "Too many requests"
        case .payloadTooLarge: "Payload too large"
        case .headersTooLarge: "Request headers too large"
        case .methodNotAllowed: "Method not allowed"
        case .internalError: "Internal error"
        }
    }

    static func invalid(_ detail: String) -> Problem { Problem(.badRequest, .invalidRequest, detail) }

    static func notFound(_ detail: String = "no such resource") -> Problem { Problem(.notFound, .notFound, detail) }

    static var invalidClientToken: Problem {
        var p = Problem(.unauthorized, .invalidClientToken, "a valid client token is required (Authorization: Bearer …)")
        p.headers[.wwwAuthenticate] = "Bearer realm=\"parley\""
        return p
    }

    static var invalidAdminToken: Problem {
        var p = Problem(.unauthorized, .invalidAdminToken, "a valid admin token is required (Authorization: Bearer …)")
        p.headers[.wwwAuthenticate] = "Bearer realm=\"parley-admin\""
        return p
    }

    static func methodNotAllowed(allowed: [String]) -> Problem {
        var p = Problem(.methodNotAllowed, .methodNotAllowed, "this method is not allowed here")
        if !allowed.isEmpty { p.headers[.allow] = allowed.joined(separator: ", ") }
        return p
    }

    static func rateLimited(retryAfter: Duration, detail: String) -> Problem {
        var p = Problem(.tooManyRequests, .rateLimited, detail)
        let seconds = retryAfter.components.seconds + (retryAfter.components.attoseconds > 0 ? 1 : 0)
        p.headers[.retryAfter] = String(max(1, seconds))
        return p
    }

    static func storeUnavailable() -> Problem {
        var p = Problem(.serviceUnavailable, .storeUnavailable, "the database is unreachable; try again shortly")
        p.headers[.retryAfter] = "2"
        return p
    }
}
