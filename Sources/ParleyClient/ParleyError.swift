import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What went wrong, by the problem's code (docs/api.md, "Status codes and problem codes"), each
/// with the problem's `detail` (written for the client, never a secret).
public enum ParleyError: Error, Sendable, Equatable {
    /// A person must sign in first (no presenter was given, or it was declined).
    case interactionRequired(Flow, detail: String)
    /// The flow ended without completing (`flow.error` says why).
    case flowFailed(Flow)
    /// The flow expired before a person completed it.
    case flowExpired(Flow)
    /// The client token is unknown: never issued, or its registration was deleted or revoked.
    case invalidClientToken(detail: String)
    /// This conversation has no registration yet (`register` first).
    case notRegistered
    /// An identity token was refused.
    case invalidIdentityToken(detail: String)
    /// Refused (`403 forbidden`), e.g. a registration waiting for approval.
    case forbidden(detail: String)
    /// The upstream refused the credentials Parley holds.
    case upstreamUnauthorized(detail: String)
    /// Too many requests: try again after `retryAfter`.
    case rateLimited(retryAfter: Duration?, detail: String)
    /// The upstream (or its authorization server) cannot be reached or answered nonsense.
    case upstreamUnavailable(retryAfter: Duration?, detail: String)
    /// The upstream did not answer in time.
    case upstreamTimeout(detail: String)
    /// Parley's database cannot be reached: try again shortly.
    case storeUnavailable(retryAfter: Duration?, detail: String)
    /// The request broke a rule of the contract.
    case invalidRequest(detail: String)
    /// The request body is larger than the destination takes.
    case payloadTooLarge(detail: String)
    /// Not found (a flow of another registration, say).
    case notFound(detail: String)
    /// Any other problem, as Parley named it.
    case other(status: Int, code: String, detail: String)
    /// Parley's answer was not HTTP, or not what the contract says.
    case invalidAnswer(String)

    /// The problem's `detail`, or a description.
    public var detail: String {
        switch self {
        case .interactionRequired(_, let detail), .invalidClientToken(let detail), .invalidIdentityToken(let detail), .forbidden(let detail),
            .upstreamUnauthorized(let detail), .rateLimited(_, let detail), .upstreamUnavailable(_, let detail), .upstreamTimeout(let detail),
            .storeUnavailable(_, let detail), .invalidRequest(let detail), .payloadTooLarge(let detail), .notFound(let detail),
            .other(_, _, let detail), .invalidAnswer(let detail):
            return detail
        case .flowFailed(let flow): return "the sign-in failed: \(flow.error ?? "failed")"
        case .flowExpired: return "the sign-in expired before it was completed"
        case .notRegistered: return "there is no registration: register first"
        }
    }

    /// The typed error of a problem answer.
    static func from(_ response: HTTPURLResponse, body: Data) -> ParleyError {
        let status = response.statusCode
        let problem = try? JSONDecoder.parley.decode(ProblemBody.self, from: body)
        let detail = problem?.detail ?? "Parley answered \(status)"
        let retryAfter = response.value(forHTTPHeaderField: "Retry-After")
            .flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { Duration.seconds(max(0, $0)) }
        switch problem?.code {
        case "interaction_required":
            guard let flow = problem?.flow else { return .invalidAnswer("interaction_required without a flow") }
            return .interactionRequired(flow, detail: detail)
        case "invalid_client_token": return .invalidClientToken(detail: detail)
        case "invalid_identity_token": return .invalidIdentityToken(detail: detail)
        case "forbidden": return .forbidden(detail: detail)
        case "upstream_unauthorized": return .upstreamUnauthorized(detail: detail)
        case "rate_limited": return .rateLimited(retryAfter: retryAfter, detail: detail)
        case "upstream_unavailable": return .upstreamUnavailable(retryAfter: retryAfter, detail: detail)
        case "upstream_timeout": return .upstreamTimeout(detail: detail)
        case "store_unavailable": return .storeUnavailable(retryAfter: retryAfter, detail: detail)
        case "invalid_request": return .invalidRequest(detail: detail)
        case "payload_too_large": return .payloadTooLarge(detail: detail)
        case "not_found": return .notFound(detail: detail)
        case let code?: return .other(status: status, code: code, detail: detail)
        case nil: return .other(status: status, code: "unknown", detail: detail)
        }
    }

    /// Every problem code this type names (a test holds it to the API document's list).
    public static let codes: Set<String> = [
        "interaction_required", "invalid_client_token", "invalid_identity_token", "forbidden", "upstream_unauthorized", "rate_limited",
        "upstream_unavailable", "upstream_timeout", "store_unavailable", "invalid_request", "payload_too_large", "not_found",
    ]
}
