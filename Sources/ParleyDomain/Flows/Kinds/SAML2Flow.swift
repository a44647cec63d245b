package import AuthFlows
package import Conversation
package import Logging
import NIOPosix
import SAMLIdentity

/// SAML2 web SSO through the hosted upstream. The start page binds the browser and
/// opens the destination's finish endpoint first (seed: "the first thing opened"); the
/// service provider challenges, the browser signs in at the identity provider directly,
/// and the flow completes when the browser reaches the finish endpoint again with the
/// finish parameter and the upstream no longer challenges.
///
/// A second factor met on the way (an OTP challenge) is this kind's own decision: the flow
/// follows it in the same browser, remembers the OTP form in its state (where a passcode
/// from `/callback/otp` goes too), and finishes at the OTP finish instead (`OTPFlow.isFinish`).
///
/// Who signed in: with `saml2.idpCertificates` configured, the `SAMLResponse` the browser posts
/// through the web path on its way to the SP's ACS is read (`SAMLIdentityReader`: its signature
/// must verify against those certificates, wrapped or extra assertions are refused). A sign-in
/// as somebody other than the registration's user ends the flow there, before the SP sees it;
/// the identity is kept in the flow's state and binds a registration without a user when the
/// flow completes. A response that cannot be read sets no user, and a registration that has
/// one does not go on without a readable sign-in.
package struct SAML2Flow: HostedFlowKind, PasscodeAwaiting {
    /// Failed because the SAML sign-in could not be read while the registration has a user.
    package static let unverified = "identity_unverified"

    /// What the flow keeps (sealed in the row): the OTP form once a second factor was met, and
    /// who signed in at the identity provider, once read.
    package struct State: Codable, Sendable {
        package var otpForm: String?
        package var signedIn: SignedInIdentity?
    }

    package let kind: FlowKind = .saml2
    package let hosted: HostedBinding
    package let state: FlowKindState<State>
    package let flows: FlowService
    package let registrations: any RegistrationRepository

    package init(_ environment: FlowKindEnvironment) {
        hosted = environment.hosted
        state = environment.state(State.self)
        flows = environment.flows
        registrations = environment.registrations
    }

    package func isOffered(by destination: Destination) -> Bool { destination.saml2 != nil }

    package func yieldsIdentity(for destination: Destination) -> Bool { destination.saml2?.idpCertificates.isEmpty == false }

    package func scopeKey(for destination: Destination) -> String? { nil }

    package func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard let settings = destination.saml2 else { return .notice(.cannotStart) }
        return hosted.begin(flow, secret: secret, destination: destination, upstreamURL: destination.baseURL + settings.finishEndpoint)
    }

    package func passcodeForm(of flow: FlowRecord) throws -> String? { try state.read(flow)?.otpForm }

    package func answer(
        _ response: inout UpstreamResponse, requestURL: String, flow: FlowRecord, destination: Destination, logger: Logger
    ) async throws -> HostedVerdict {
        var otpForm = try passcodeForm(of: flow)
        if let otp = destination.otp, let form = OTPFlow.openFormOnChallenge(&response, requestURL: requestURL, settings: otp),
            otpForm == nil
        {
            try await state.update(flow) { current in current = State(otpForm: form, signedIn: current?.signedIn) }
            otpForm = form
            logger.info("flow continues with a second factor", metadata: ["flow.id": .string(flow.idString)])
        }
        if otpForm != nil, let otp = destination.otp {
            return try await completing(OTPFlow.isFinish(requestURL: requestURL, response: response, settings: otp), flow, logger: logger)
        }
        guard let settings = destination.saml2, (200..<400).contains(response.status),
            let requested = URLParts(requestURL), let finish = URLParts(destination.baseURL + settings.finishEndpoint),
            requested.path == finish.path,
            (requested.query ?? "").split(separator: "&").contains(where: {
                $0 == Substring(settings.finishEndpointParam) || $0.hasPrefix(settings.finishEndpointParam + "=")
            })
        else { return .forward }
        return try await SAML2Detector(settings: settings).isChallenge(&response) ? .forward : completing(.complete, flow, logger: logger)
    }

    /// A finish met: the sign-in read at the ACS must be the registration's user (a first one
    /// binds it); then the flow completes, else it has ended failed.
    /// A finish met without a sign-in read (no `SAMLResponse` crossed the web path: artifact
    /// binding, a multipart post, an SP that takes it in a GET) ends `identity_unknown` where the
    /// registration has a user or the destination requires one.
    private func completing(_ verdict: HostedVerdict, _ flow: FlowRecord, logger: Logger) async throws -> HostedVerdict {
        guard verdict == .complete, let current = try await flows.flows.find(id: flow.id) else { return verdict }
        guard let signedIn = try state.read(current)?.signedIn else {
            return try await flows.admitUnknown(current, logger: logger) ? .complete : .ended
        }
        return try await flows.admit(current, signedIn: signedIn, logger: logger) ? .complete : .ended
    }

    package func readsFormPosts(for destination: Destination) -> Bool { destination.saml2?.idpCertificates.isEmpty == false }

    /// The `SAMLResponse` on its way to the SP's ACS: who signed in, read before the SP sees it.
    package func formPosted(_ fields: [(String, String)], flow: FlowRecord, destination: Destination, logger: Logger) async throws
        -> HostedRequestVerdict
    {
        guard let certificates = destination.saml2?.idpCertificates, !certificates.isEmpty,
            let response = fields.first(where: { $0.0 == "SAMLResponse" })?.1
        else { return .forward }
        let registration = try await registrations.find(id: flow.registrationID)
        // Parsing and signature checking (libxml2, libxmlsec1) on NIO's thread pool, never on an event loop.
        let read = try await NIOThreadPool.singleton.runIfActive { SAMLIdentityReader.read(samlResponse: response, trusting: certificates) }
        switch read {
        case .failure(let error):
            logger.info(
                "a SAML response through the hosted upstream names no verifiable sign-in",
                metadata: ["flow.id": .string(flow.idString), "saml.check": .string(error.check.description)])
            // Without a readable sign-in a registration that has a user cannot be judged: it ends here.
            guard registration?.user == nil else {
                try await flows.finish(flow, status: .failed, error: Self.unverified, logger: logger)
                return .ended
            }
            return .forward
        case .success(let identity):
            let signedIn = SignedInIdentity(issuer: identity.issuer, subject: identity.nameID)
            if let registration, let user = registration.user, !flows.binding.sameUser(user, signedIn, destination: registration.destination) {
                _ = try await flows.admit(flow, signedIn: signedIn, logger: logger)  // ends it, identity_mismatch
                return .ended
            }
            try await state.update(flow) { current in current = State(otpForm: current?.otpForm, signedIn: signedIn) }
            return .forward
        }
    }
}
