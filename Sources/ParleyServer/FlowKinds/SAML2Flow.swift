import AuthFlows
import Conversation
import Logging

/// SAML2 web SSO through the hosted upstream. The start page binds the browser and
/// opens the destination's finish endpoint first (seed: "the first thing opened"); the
/// service provider challenges, the browser signs in at the identity provider directly,
/// and the flow completes when the browser reaches the finish endpoint again with the
/// finish parameter and the upstream no longer challenges.
///
/// A second factor met on the way (an OTP challenge) is this kind's own decision: the flow
/// follows it in the same browser, remembers the OTP form in its state (where a passcode
/// from `/callback/otp` goes too), and finishes at the OTP finish instead (`OTPFlow.isFinish`).
struct SAML2Flow: HostedFlowKind, PasscodeAwaiting {
    /// What the flow keeps (sealed in the row): the OTP form once a second factor was met.
    struct State: Codable, Sendable { var otpForm: String? }

    let kind: FlowKind = .saml2
    let hosted: HostedBinding
    let state: FlowKindState<State>

    init(_ environment: FlowKindEnvironment) {
        hosted = environment.hosted
        state = environment.state(State.self)
    }

    func isOffered(by destination: Destination) -> Bool { destination.saml2 != nil }

    func scopeKey(for destination: Destination) -> String? { nil }

    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard let settings = destination.saml2 else { return .failure(.notFound("this flow cannot be started here")) }
        return hosted.begin(flow, secret: secret, destination: destination, upstreamURL: destination.baseURL + settings.finishEndpoint)
    }

    func passcodeForm(of flow: FlowRecord) throws -> String? { try state.read(flow)?.otpForm }

    func answer(
        _ response: inout UpstreamResponse, requestURL: String, flow: FlowRecord, destination: Destination, logger: Logger
    ) async throws -> HostedVerdict {
        var otpForm = try passcodeForm(of: flow)
        if let otp = destination.otp, let form = OTPFlow.openFormOnChallenge(&response, requestURL: requestURL, settings: otp),
            otpForm == nil
        {
            try await state.update(flow) { $0 = State(otpForm: form) }
            otpForm = form
            logger.info("flow continues with a second factor", metadata: ["flow.id": .string(flow.idString)])
        }
        if otpForm != nil, let otp = destination.otp { return OTPFlow.isFinish(requestURL: requestURL, response: response, settings: otp) }
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
