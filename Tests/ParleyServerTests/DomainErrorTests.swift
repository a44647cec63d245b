import AuthFlows
import Foundation
import Hummingbird
import ParleyCrypto
import ParleyDomain
@testable import ParleyServer
import Testing

/// Rooms throw domain errors; `Problem.from` is the one place that gives each its status,
/// code and words. These are the answers the API has always given for them.
@Suite struct DomainErrorTests {
    static func expect(
        _ error: any Error, _ status: HTTPResponse.Status, _ code: Problem.Code, _ detail: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let problem = Problem.from(error)
        #expect(problem.status == status, sourceLocation: sourceLocation)
        #expect(problem.code == code, sourceLocation: sourceLocation)
        #expect(problem.detail == detail, sourceLocation: sourceLocation)
    }

    @Test func registrationErrors() {
        Self.expect(RegistrationError.unknownDestination("nowhere"), .badRequest, .invalidRequest, "unknown destination 'nowhere'")
        Self.expect(
            RegistrationError.unknownDestination(String(repeating: "x", count: 300)), .badRequest, .invalidRequest,
            "unknown destination '\(String(repeating: "x", count: 100))'")
        Self.expect(RegistrationError.returnURLNotAllowed, .badRequest, .invalidRequest, "returnUrl is not allowed for this destination")
        Self.expect(
            RegistrationError.certificateNotBase64(maxBytes: 65536), .badRequest, .invalidRequest,
            "clientCertificate.pkcs12 must be base64 PKCS#12 of at most 65536 bytes")
        Self.expect(
            RegistrationError.certificateUnusable(.wrongPassword), .badRequest, .invalidRequest,
            "clientCertificate.pkcs12 cannot be opened with the given password")
        Self.expect(
            RegistrationError.enrolmentSecretRefused, .forbidden, .forbidden,
            "this destination needs an enrolment secret (Parley-Enrolment) that was missing or wrong")
        Self.expect(RegistrationError.notPendingApproval, .badRequest, .invalidRequest, "the registration is not waiting for approval")
        Self.expect(RegistrationError.notFound, .notFound, .notFound, "no such registration")
    }

    @Test func inputAdministrationAndUpstreamErrors() {
        Self.expect(
            InvalidInput.printable(field: "deviceType", maxBytes: 256), .badRequest, .invalidRequest,
            "deviceType must be at most 256 printable characters")
        Self.expect(
            InvalidInput.text(field: "returnUrl", maxBytes: 2048), .badRequest, .invalidRequest,
            "returnUrl must be 1 to 2048 bytes without control characters")
        Self.expect(
            AdministrationError.revocationOfEverything, .badRequest, .invalidRequest,
            "name at least one of registrationId, destination, userHint, scopeKey, user: a revocation of everything is refused")
        Self.expect(
            SMPRegistrationError.answeredWithoutAPPCID, .badGateway, .upstreamUnavailable, "the upstream registration answered without an APPCID")
        Self.expect(SMPRegistrationError.credentialsRefused, .forbidden, .upstreamUnauthorized, "the upstream refused the registration's credentials")
        Self.expect(SMPRegistrationError.unexpectedStatus(500), .badGateway, .upstreamUnavailable, "the upstream registration answered 500")
    }

    /// The errors the domain throws since it names no HTTP type: each answers as the `Problem` the
    /// room built itself before (status, code, words and headers).
    @Test func theDomainsOwnErrorsAnswerAsTheirProblemsDid() throws {
        Self.expect(RegistrationError.clientTokenRefused, .unauthorized, .invalidClientToken, "a valid client token is required (Authorization: Bearer …)")
        #expect(Problem.from(RegistrationError.clientTokenRefused).headers[.wwwAuthenticate] == "Bearer realm=\"parley\"")
        Self.expect(RegistrationError.destinationGone, .badRequest, .invalidRequest, "the registration's destination is no longer configured")
        Self.expect(FlowError.notFound, .notFound, .notFound, "no such flow")
        Self.expect(
            AgentAccessError.destinationNotNamed, .badRequest, .invalidRequest,
            "an access token does not name a registration by itself: say which destination in the Parley-Destination header")
        Self.expect(AgentAccessError.unknownDestination, .badRequest, .invalidRequest, "unknown destination in Parley-Destination")
        Self.expect(
            AgentAccessError.agentsNotTaken, .forbidden, .forbidden, "this destination does not take agents' access tokens (registration.implicit)")
        let refused = AgentAccessError.tokenRefused(detail: "expired", challenge: "Bearer realm=\"parley\", error=\"invalid_token\"")
        Self.expect(refused, .unauthorized, .invalidClientToken, "the access token was refused: expired")
        #expect(Problem.from(refused).headers[.wwwAuthenticate] == "Bearer realm=\"parley\", error=\"invalid_token\"")
        let scopes = AgentAccessError.insufficientScope(missing: ["orders.write"], challenge: "Bearer scope=\"orders.read orders.write\"")
        Self.expect(scopes, .forbidden, .forbidden, "the access token lacks scopes this destination asks for: orders.write")
        #expect(Problem.from(scopes).headers[.wwwAuthenticate] == "Bearer scope=\"orders.read orders.write\"")
        let limited = RateLimited(retryAfter: .milliseconds(1500), detail: "too many failed sign-ins; try again after Retry-After seconds")
        Self.expect(limited, .tooManyRequests, .rateLimited, "too many failed sign-ins; try again after Retry-After seconds")
        #expect(Problem.from(limited).headers[.retryAfter] == "2")

        let flow = FlowView(
            id: "f", kind: "oauth2", status: "pending", url: "https://parley.example/flows/f?k=s", expiresAt: Date(timeIntervalSince1970: 0),
            error: nil)
        let interaction = InteractionRequired(detail: "a person must sign in (oauth2); open the flow URL", flow: flow)
        Self.expect(interaction, .unauthorized, .interactionRequired, "a person must sign in (oauth2); open the flow URL")
        #expect(Problem.from(interaction).headers[.parleyFlow] == "https://parley.example/flows/f?k=s")
        #expect(Problem.from(interaction).extra["flow"] == (try JSONValueEncoder().encode(flow)))
        // What the domain's metrics and audit log call them, and which are answers, not failures.
        #expect(ErrorNames.contract.code(interaction) == "interaction_required")
        #expect(ErrorNames.contract.isAnswer(interaction) && ErrorNames.contract.isAnswer(limited) && ErrorNames.contract.isAnswer(refused))
        #expect(!ErrorNames.contract.isAnswer(SMPRegistrationError.credentialsRefused))
    }

    @Test func textRules() throws {
        #expect(try InvalidInput.checkedText(nil, "f") == nil)
        #expect(try InvalidInput.checkedText("ok é", "f") == "ok é")
        for bad in ["", "a\u{0}", "a\u{7F}", "a\tb", String(repeating: "x", count: 2049)] {
            #expect(throws: InvalidInput.text(field: "f", maxBytes: 2048)) { try InvalidInput.checkedText(bad, "f") }
        }
        // Device and user fields: empty is allowed, DEL is not refused (as the API has always done).
        #expect(try InvalidInput.checkedPrintable("", "deviceType") == "")
        #expect(try InvalidInput.checkedPrintable("a\u{7F}", "deviceType") == "a\u{7F}")
        for bad in ["a\nb", String(repeating: "x", count: 257)] {
            #expect(throws: InvalidInput.printable(field: "deviceType", maxBytes: 256)) { try InvalidInput.checkedPrintable(bad, "deviceType") }
        }
    }

    @Test func auditActionsAreTheStoredStrings() {
        let raw = AuditAction.allCases.map(\.rawValue)
        #expect(Set(raw).count == raw.count)
        for action in raw {
            #expect(action.wholeMatch(of: /[a-z_]+(\.[a-z_]+)+/) != nil, "\(action)")
        }
        #expect(AuditAction.registrationRefused.rawValue == "registration.refused")
        #expect(AuditAction.registrationUpstreamDeleteFailed.rawValue == "registration.upstream_delete_failed")
        #expect(AuditAction.adminRegistrationsListed.rawValue == "admin.registrations.listed")
        // Flow ends: "flow." and the status, as FlowService has always written them.
        for status in FlowStatus.allCases where status != .pending {
            #expect(AuditAction(flowFinished: status)?.rawValue == "flow.\(status.rawValue)")
        }
        #expect(AuditAction(flowFinished: .pending) == nil)
        // Token events keep the broker's names.
        for event in [TokenEvent.issued, .refreshed, .refreshRejected, .refreshFailed] {
            #expect(AuditAction(event).rawValue == event.rawValue)
        }
    }
}
