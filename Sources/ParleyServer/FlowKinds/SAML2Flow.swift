import AuthFlows
import Conversation
import Hummingbird

/// SAML2 web SSO through the hosted upstream. The start page binds the browser and
/// opens the destination's finish endpoint first (seed: "the first thing opened"); the
/// service provider challenges, the browser signs in at the identity provider directly,
/// and the flow completes when the browser reaches the finish endpoint again with the
/// finish parameter and the upstream no longer challenges. A second factor met on the
/// way moves the finish to the OTP finish (`OTPFlow.isFinish`).
struct SAML2Flow: HostedFlowKind {
    let kind: FlowKind = .saml2
    let hosted: HostedBinding

    func isOffered(by destination: Destination) -> Bool { destination.saml2 != nil }

    func scopeKey(for destination: Destination) -> String? { nil }

    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> Response {
        guard let settings = destination.saml2 else { return Page.problem(Problem(.notFound, .notFound, "this flow cannot be started here")) }
        return hosted.begin(flow, secret: secret, destination: destination, upstreamURL: destination.baseURL + settings.finishEndpoint)
    }

    var routes: [FlowRoute] { [] }

    func verdict(requestURL: String, response: inout UpstreamResponse, flow: FlowRecord, destination: Destination) async throws
        -> HostedVerdict
    {
        if flow.secondFactor, let otp = destination.otp { return OTPFlow.isFinish(requestURL: requestURL, response: response, settings: otp) }
        guard let settings = destination.saml2, (200..<400).contains(response.status),
            let requested = URLParts(requestURL), let finish = URLParts(destination.baseURL + settings.finishEndpoint),
            requested.path == finish.path,
            (requested.query ?? "").split(separator: "&").contains(where: {
                $0 == Substring(settings.finishEndpointParam) || $0.hasPrefix(settings.finishEndpointParam + "=")
            })
        else { return .forward }
        return try await SAML2Detector(settings: settings).isChallenge(&response) ? .forward : .complete
    }
}
