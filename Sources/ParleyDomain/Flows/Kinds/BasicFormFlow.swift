package import AuthFlows
import Conversation
import Foundation
package import Logging
import ParleyCrypto
import ParleyEncoding

/// `basic: {form: true}`: when the held credentials fail (or none are held), the flow's
/// page is a credentials form. Credentials that succeed upstream are sealed into the
/// registration and the flow completes; wrong ones show the form again, and
/// `maxAttempts` wrong ones end the flow as failed. The form posts back only to
/// Parley's own origin with the flow's secret, so another site cannot post to it.
package struct BasicFormFlow: FlowKindHandler {
    package static let maxAttempts = 5
    package static let maxFieldLength = 256

    /// Wrong credentials entered in this flow's form so far (sealed in the row).
    package struct State: Codable, Sendable { var failedAttempts: Int }

    package let kind: FlowKind = .basic
    package let flows: FlowService
    package let registrations: any RegistrationRepository
    package let conversations: Conversations
    package let secrets: Secrets
    package let state: FlowKindState<State>
    package let invalidation: CacheInvalidation
    package let limits: any LoginLimiter
    package let publicURL: String

    package init(_ environment: FlowKindEnvironment, invalidation: CacheInvalidation, limits: any LoginLimiter) {
        flows = environment.flows
        registrations = environment.registrations
        conversations = environment.conversations
        secrets = environment.secrets
        state = environment.state(State.self)
        self.invalidation = invalidation
        self.limits = limits
        publicURL = environment.publicURL
    }

    package func isOffered(by destination: Destination) -> Bool { destination.basic?.form == true }

    /// The username the upstream accepts is who signed in.
    package func yieldsIdentity(for destination: Destination) -> Bool { true }

    package func scopeKey(for destination: Destination) -> String? { nil }

    package func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        guard destination.basic?.form == true else { return .notice(.cannotStart) }
        return form(flow, secret: secret, registration: registration, destination: destination, error: nil)
    }

    package func routes(_ kinds: FlowKinds) -> [FlowRoute] {
        [
            FlowRoute(path: "/flows/{id}/credentials", methods: [.post], sameOriginForm: true) { input, logger in
                try await submit(input, logger: logger)
            }
        ]
    }

    private func form(
        _ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination, error: CredentialsForm.Error?
    ) -> FlowPage {
        .credentialsForm(
            CredentialsForm(
                service: destination.name, action: (URLParts(publicURL)?.path ?? "") + "/flows/\(flow.idString)/credentials", secret: secret,
                error: error, requester: PageRequester(registration, destination: destination)))
    }

    /// `POST /flows/{id}/credentials` from the form (only from its own page: `sameOriginForm`).
    package func submit(_ input: FlowInput, logger: Logger) async throws -> FlowPage {
        func value(_ name: String) -> String? { input.value(name) }
        let flow: FlowRecord
        switch try await flows.browserAccess(id: input.id, secret: value("k")) {
        case .pending(let pending) where pending.kind == .basic: flow = pending
        case .pending: return .notice(.linkNotValid)
        case .answered(let page): return page
        }
        let secret = value("k") ?? ""
        guard let registration = try await registrations.find(id: flow.registrationID),
            let destination = try? conversations.destination(of: registration)
        else { return .notice(.cannotStart) }
        guard let username = value("username"), let password = value("password"), Self.acceptable(username, isUser: true),
            Self.acceptable(password, isUser: false)
        else {
            return form(flow, secret: secret, registration: registration, destination: destination, error: .incomplete)
        }

        // Who signs in here is the username the upstream accepts. A registration that has a
        // user takes no other: a sign-in as somebody else ends the flow before anything is sent.
        let signedIn = SignedInIdentity(issuer: destination.baseURL, subject: username)
        if let user = registration.user, !flows.binding.sameUser(user, signedIn, destination: registration.destination) {
            _ = try await flows.admit(flow, signedIn: signedIn, logger: logger)
            return flows.done(flow)
        }
        let attempt = LoginAttempt(registration: registration.id, tried: username, client: input.client)
        try limits.checkLoginAllowed(attempt)
        let credentials = UserCredentials(username: username, password: password)
        if try await accepted(credentials, registration: registration, destination: destination, flow: flow) {
            // A first sign-in binds the registration to this user (unless another flow just did).
            guard try await flows.admit(flow, signedIn: signedIn, logger: logger) else { return flows.done(flow) }
            try await registrations.setCredentials(id: registration.id, sealed: try secrets.seal(credentials: credentials, id: registration.id))
            await invalidation.changed(registration.id)  // no cached registration or manager without them
            try await flows.finish(flow, status: .completed, error: nil, logger: logger)
            return flows.done(flow)
        }
        limits.recordFailedLogin(attempt)
        var attempts = 0
        _ = try await state.update(flow) { current in
            attempts = (current?.failedAttempts ?? 0) + 1
            current = State(failedAttempts: attempts)
        }
        logger.info("basic form credentials refused upstream", metadata: ["flow.id": .string(flow.idString), "attempts": "\(attempts)"])
        if attempts >= Self.maxAttempts {
            try await flows.finish(flow, status: .failed, error: "too_many_attempts", logger: logger)
            return flows.done(flow)
        }
        return form(flow, secret: secret, registration: registration, destination: destination, error: .refused)
    }

    /// Tries the credentials where the challenge was met (the destination URL otherwise). What
    /// the upstream sets is staged with the flow until it completes as the registration's user.
    private func accepted(
        _ credentials: UserCredentials, registration: RegistrationRecord, destination: Destination, flow: FlowRecord
    ) async throws -> Bool {
        var material = try secrets.material(of: registration)
        material.credentials = credentials
        let manager = conversations.configurator.makeManager(
            for: destination, registration: material, audience: .browser(nil),
            cookieJar: StagedCookieJar(staging: conversations.staging, flowID: flow.id, registrationID: registration.idString))
        let url = flow.challengeURL ?? destination.baseURL + "/"
        guard case .response(let response) = try await manager.execute(UpstreamRequest(method: "GET", url: url))
        else { return false }
        response.body.discard()
        // What the upstream answers a signed-in user: a page (2xx) or onward (3xx). A 401, a 403,
        // a 5xx or an answer of any other kind is no sign-in.
        return (200..<400).contains(response.status)
    }

    package static func acceptable(_ text: String, isUser: Bool) -> Bool {
        !text.isEmpty && text.count <= maxFieldLength && !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
            && !(isUser && text.contains(":"))
    }
}
