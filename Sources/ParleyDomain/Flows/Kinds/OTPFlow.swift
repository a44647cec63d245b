package import AuthFlows
package import Conversation
import Foundation
package import Logging
import ParleyCrypto
import ParleyEncoding

/// A second factor met by an API call (seed: a `3xx` with `x-smp-authentication:
/// otp-challenge`). The start page binds the browser and opens the OTP form, with the
/// additional parameters, through the hosted upstream; the flow completes at a redirect
/// carrying the finish parameters. A passcode from an authenticator app can also arrive
/// at `/callback/otp`: Parley posts it to the OTP form on the flow's behalf.
package struct OTPFlow: HostedFlowKind, PasscodeAwaiting {
    package static let maxPasscodeLength = 32

    package let kind: FlowKind = .otp
    package let hosted: HostedBinding
    package let flows: FlowService
    package let registrations: any RegistrationRepository
    package let conversations: Conversations

    package init(_ environment: FlowKindEnvironment) {
        hosted = environment.hosted
        flows = environment.flows
        registrations = environment.registrations
        conversations = environment.conversations
    }

    package func isOffered(by destination: Destination) -> Bool { false }  // only a challenge starts one

    /// A second factor adds no identity: the first factor's, already held to the user, stands.
    package func yieldsIdentity(for destination: Destination) -> Bool { true }

    package func scopeKey(for destination: Destination) -> String? { nil }

    package func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard destination.otp != nil, let form = flow.challengeURL else { return .notice(.cannotStart) }
        return hosted.begin(flow, secret: secret, destination: destination, upstreamURL: form)
    }

    /// `/callback/otp` serves every kind that may await a passcode (an OTP flow, or a
    /// saml2 flow that met its second factor in the browser).
    package func routes(_ kinds: FlowKinds) -> [FlowRoute] {
        [
            FlowRoute(path: "/callback/otp", methods: [.get, .post]) { input, logger in try await callback(input, logger: logger, kinds: kinds) }
        ]
    }

    package func passcodeForm(of flow: FlowRecord) throws -> String? { flow.challengeURL }

    package func answer(
        _ response: inout UpstreamResponse, requestURL: String, flow: FlowRecord, destination: Destination, logger: Logger
    ) async throws -> HostedVerdict {
        guard let otp = destination.otp else { return .forward }
        Self.openFormOnChallenge(&response, requestURL: requestURL, settings: otp)
        return Self.isFinish(requestURL: requestURL, response: response, settings: otp)
    }

    /// An OTP challenge met in the browser: the browser goes to the OTP form (with the
    /// additional parameters) instead of where the challenge pointed. The form's URL, or nil.
    @discardableResult
    package static func openFormOnChallenge(_ response: inout UpstreamResponse, requestURL: String, settings: OTPSettings) -> String? {
        let detector = OTPDetector(settings: settings)
        guard let location = detector.challengeLocation(response, requestURL: requestURL) else { return nil }
        let form = detector.formURL(location)
        response.headers.set("Location", form)
        return form
    }

    /// The seed's finish: a redirect whose URL carries the finish parameters.
    package static func isFinish(requestURL: String, response: UpstreamResponse, settings: OTPSettings) -> HostedVerdict {
        let detector = OTPDetector(settings: settings)
        if (300..<400).contains(response.status), let location = response.headers["Location"],
            let absolute = URLParts.resolve(location, against: requestURL), detector.isFinish(absolute)
        {
            return .complete
        }
        return .forward
    }

    /// `GET|POST /callback/otp?flow=…&k=…&passcode=…`: a passcode for a waiting OTP step.
    package func callback(_ input: FlowInput, logger: Logger, kinds: FlowKinds) async throws -> FlowPage {
        func value(_ name: String) -> String? { input.value(name) }
        let flow: FlowRecord
        switch try await flows.browserAccess(id: value("flow"), secret: value("k")) {
        case .pending(let pending): flow = pending
        case .answered(let page): return page
        }
        // The OTP form came from an upstream's `Location`: Parley posts only under the destination's URL.
        guard let awaiting = kinds[flow.kind] as? any PasscodeAwaiting, let form = try awaiting.passcodeForm(of: flow),
            let registration = try await registrations.find(id: flow.registrationID),
            let destination = try? conversations.destination(of: registration), let otp = destination.otp,
            hosted.publicLocation(forUpstream: form, destination: destination) != nil
        else { return .notice(.passcodeNotAwaited) }
        guard let passcode = value("passcode"), !passcode.isEmpty, passcode.count <= Self.maxPasscodeLength,
            passcode.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || ("0"..."9").contains($0) })
        else { return .notice(.passcodeMissing) }

        let body = PercentEncoding.encodeForm([(otp.passcodeField, passcode)])
        let result = try await conversations.browserManager(for: registration, flow: flow).execute(
            UpstreamRequest(
                method: "POST", url: form, headers: ["Content-Type": "application/x-www-form-urlencoded"], body: .bytes(Array(body.utf8))))
        guard case .response(var response) = result else { return .notice(.passcodeRefused) }
        response.body.discard()
        // An upstream that answers in the browser's address space: its `Location` in its own.
        conversations.addressSpace(of: destination)?.mapLocationBack(in: &response)
        guard Self.isFinish(requestURL: form, response: response, settings: otp) == .complete else {
            logger.info("otp passcode refused upstream", metadata: ["flow.id": .string(flow.idString)])
            return .notice(.passcodeRefused)
        }
        try await flows.finish(flow, status: .completed, error: nil, logger: logger)
        return flows.done(flow)
    }
}
