import AuthFlows
import Conversation
import Hummingbird
import ParleyCrypto
import Store

extension Problem {
    /// The one place where failures become contract answers. Details never carry
    /// secrets: transport and store errors describe themselves safely.
    static func from(_ error: any Error) -> Problem {
        switch error {
        case let problem as Problem:
            return problem
        case let error as TransportError:
            switch error.code {
            case .timeout: return Problem(.gatewayTimeout, .upstreamTimeout, "the upstream did not answer in time")
            case .unavailable: return Problem(.badGateway, .upstreamUnavailable, "the upstream is unreachable: \(error.detail)")
            case .invalidRequest: return Problem(.badGateway, .upstreamUnavailable, "the upstream request could not be made: \(error.detail)")
            case .bodyTooLarge: return Problem(.badGateway, .upstreamUnavailable, "the upstream answer was larger than Parley accepts")
            case .invalidResponse: return Problem(.badGateway, .upstreamUnavailable, "the upstream's answer is not usable HTTP: \(error.detail)")
            case .cancelled: return Problem(.badGateway, .upstreamUnavailable, "the upstream exchange was cancelled")
            }
        case let error as OAuth2Error:
            switch error.code {
            case .temporarilyUnavailable:
                var problem = Problem(.serviceUnavailable, .upstreamUnavailable, "the authorization server is unavailable; try again later")
                problem.headers[.retryAfter] = String(max(1, error.retryAfter?.components.seconds ?? 5))
                return problem
            case .refused:
                return Problem(.forbidden, .upstreamUnauthorized, error.detail)
            case .rateLimited:
                return .rateLimited(retryAfter: error.retryAfter ?? .seconds(1), detail: error.detail)
            case .invalidResponse:
                return Problem(.badGateway, .upstreamUnavailable, error.detail)
            }
        case let error as ConversationError:
            return Problem(.badGateway, .upstreamUnavailable, "the upstream conversation did not settle: \(error.detail)")
        case let error as StoreError where error.code == .unavailable:
            return .storeUnavailable()
        case is SealingError:
            return Problem(.internalServerError, .internalError, "a stored secret cannot be opened with the configured key ring")
        case let error as HTTPError:
            switch error.status {
            case .notFound: return .notFound()
            case .methodNotAllowed: return Problem(.methodNotAllowed, .methodNotAllowed, "this method is not allowed here")
            case .contentTooLarge: return Problem(.contentTooLarge, .payloadTooLarge, "the request body is too large")
            case .badRequest: return .invalid("the request could not be read")
            default: return Problem(error.status, error.status.code >= 500 ? .internalError : .invalidRequest, error.status.reasonPhrase)
            }
        default:
            return Problem(.internalServerError, .internalError, "an unexpected error occurred")
        }
    }
}
