import AuthFlows
import Conversation
import Hummingbird
import NIOHTTP1
import ParleyCrypto
import Store
import ParleyDomain

extension Problem {
    /// The one place where failures become contract answers: rooms and controllers throw
    /// domain errors (`InvalidInput`, `RegistrationError`, `AdministrationError`,
    /// `SMPRegistrationError`, `AgentAccessError`, `FlowError`, `RateLimited`, and the
    /// `InteractionRequired` answer) and the lower layers theirs; each gets its status, code and
    /// detail here. Details never carry secrets: transport and store errors describe
    /// themselves safely.
    static func from(_ error: any Error) -> Problem {
        switch error {
        case let problem as Problem:
            return problem
        case let error as InvalidInput:
            return mapping(error)
        case let error as RegistrationError:
            return mapping(error)
        case let error as AdministrationError:
            return mapping(error)
        case let error as SMPRegistrationError:
            return mapping(error)
        case let error as AgentAccessError:
            return mapping(error)
        case let interaction as InteractionRequired:
            var problem = Problem(.unauthorized, .interactionRequired, interaction.detail)
            if let url = interaction.flow.url { problem.headers[.parleyFlow] = url }
            problem.extra["flow"] = (try? JSONValueEncoder().encode(interaction.flow)) ?? .null
            return problem
        case let error as RateLimited:
            return .rateLimited(retryAfter: error.retryAfter, detail: error.detail)
        case FlowError.notFound:
            return .notFound("no such flow")
        case let error as IdentityTokenError:
            // `detail` names the failed check, never the token.
            return Problem(.unauthorized, .invalidIdentityToken, error.detail)
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
            case .identityTokenExpired:
                return Problem(.unauthorized, .invalidIdentityToken, error.detail)
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
        case is HTTPParserError:
            // The HTTP parser gave up inside a request body (a chunk size that is not hex, a
            // bad chunk line, an unknown transfer coding, …): the client's framing, a 400; the
            // parser has already doomed the connection, so it closes after this answer.
            return .invalid("the request could not be read: its framing is not valid HTTP/1.1")
        default:
            return Problem(.internalServerError, .internalError, "an unexpected error occurred")
        }
    }

    private static func mapping(_ error: InvalidInput) -> Problem {
        switch error {
        case .text(let field, let maxBytes): .invalid("\(field) must be 1 to \(maxBytes) bytes without control characters")
        case .printable(let field, let maxBytes): .invalid("\(field) must be at most \(maxBytes) printable characters")
        case .limit(let max): .invalid("limit must be a whole number from 1 to \(max)")
        case .cursor: .invalid("cursor is not one Parley handed out")
        case .since: .invalid("since must be an RFC 3339 date-time")
        case .uuid(let field): .invalid("\(field) must be a UUID")
        case .eventType: .invalid("type must be one of " + LifecycleEventType.allCases.map(\.rawValue).joined(separator: ", "))
        }
    }

    private static func mapping(_ error: RegistrationError) -> Problem {
        switch error {
        case .unknownDestination(let name): .invalid("unknown destination '\(name.prefix(100))'")
        case .returnURLNotAllowed: .invalid("returnUrl is not allowed for this destination")
        case .certificateNotBase64(let maxBytes): .invalid("clientCertificate.pkcs12 must be base64 PKCS#12 of at most \(maxBytes) bytes")
        case .certificateUnusable(let reason): .invalid("clientCertificate.pkcs12 \(reason)")
        case .enrolmentSecretRefused:
            Problem(.forbidden, .forbidden, "this destination needs an enrolment secret (Parley-Enrolment) that was missing or wrong")
        case .identityTokenRequired:
            Problem(.forbidden, .forbidden, "this destination registers verified users only: send an identityToken")
        case .identityNotVerified:
            Problem(.forbidden, .forbidden, "this registration's user was not verified by an identity token, so it takes none")
        case .identityOfAnotherUser:
            Problem(.forbidden, .forbidden, "the identity token names another user than this registration's")
        case .notPendingApproval: .invalid("the registration is not waiting for approval")
        case .notFound: .notFound("no such registration")
        case .clientTokenRefused: .invalidClientToken
        case .destinationGone: .invalid("the registration's destination is no longer configured")
        case .browserOriginRefused:
            Problem(.forbidden, .forbidden, "a browser registration must come from an origin of a browser app that lists this destination")
        }
    }

    private static func mapping(_ error: AgentAccessError) -> Problem {
        switch error {
        case .destinationNotNamed:
            return .invalid("an access token does not name a registration by itself: say which destination in the \(AgentAccess.destinationHeader) header")
        case .unknownDestination:
            return .invalid("unknown destination in \(AgentAccess.destinationHeader)")
        case .agentsNotTaken:
            return Problem(.forbidden, .forbidden, "this destination does not take agents' access tokens (registration.implicit)")
        case .tokenRefused(let detail, let challenge):
            var problem = Problem(.unauthorized, .invalidClientToken, "the access token was refused: " + detail)
            problem.headers[.wwwAuthenticate] = challenge
            return problem
        case .insufficientScope(let missing, let challenge):
            var problem = Problem(
                .forbidden, .forbidden, "the access token lacks scopes this destination asks for: " + missing.joined(separator: " "))
            problem.headers[.wwwAuthenticate] = challenge
            return problem
        }
    }

    private static func mapping(_ error: AdministrationError) -> Problem {
        switch error {
        case .revocationOfEverything:
            .invalid("name at least one of registrationId, destination, userHint, scopeKey, user: a revocation of everything is refused")
        }
    }

    private static func mapping(_ error: SMPRegistrationError) -> Problem {
        switch error {
        case .answeredWithoutAPPCID: Problem(.badGateway, .upstreamUnavailable, "the upstream registration answered without an APPCID")
        case .credentialsRefused: Problem(.forbidden, .upstreamUnauthorized, "the upstream refused the registration's credentials")
        case .unexpectedStatus(let status): Problem(.badGateway, .upstreamUnavailable, "the upstream registration answered \(status)")
        }
    }
}

extension ErrorNames {
    /// The contract's names, from `Problem.from`: what the domain's metrics and audit log say.
    static let contract = ErrorNames(
        code: { Problem.from($0).code.rawValue },
        isAnswer: { $0 is Problem || $0 is InteractionRequired || $0 is RateLimited || $0 is AgentAccessError })
}
