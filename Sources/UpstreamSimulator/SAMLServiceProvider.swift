import Foundation
import Hummingbird

/// Where browsers reach the mock IdP: the configured base, else the simulator's own address.
func idpBase(_ configuration: SimulatorConfiguration, _ state: SimulatorState, _ request: Request) -> String {
    if let configured = configuration.idpBaseURL { return configured }
    if let port = state.port { return "http://127.0.0.1:\(port)" }
    return "http://\(request.head.authority ?? "127.0.0.1")"
}

/// A SAML2-protected SMP-like service provider mounted at `/sp`, behaving as it would behind a
/// reverse proxy: every URL it emits starts with the external base (`ExternalView`).
///
/// - `POST /sp/saml/acs` (form `SAMLResponse`, `RelayState`) — checks the mock IdP's response
///   (signature, `Destination`/`Recipient` = this ACS URL, audience, expiry, one-time use), opens
///   the session (`Set-Cookie: SP_SESSION=…; Path=/sp; HttpOnly`; the path and a `Domain` follow
///   `SPSettings.cookieScope` and `cookieDomain`) and `302`s to RelayState, or answers the OTP
///   challenge when OTP is `afterSAML`. `403` text for a bad response.
/// - `/sp/otp`, `/sp/otp/finished` — the OTP stage (`OTPStage`), without the SAML gate.
/// - Anything else needs a session: without one, the SAML challenge (`SPSettings.binding`:
///   `200` auto-posting form, or `302` to `{idp}/idp/sso?SAMLRequest=…&RelayState=…`; plus
///   `com.sap.cloud.security.login: login-request` when `identifyingHeader`); with OTP pending,
///   the OTP challenge. Then:
///   - `GET /sp/SAMLAuthLauncher` — `302` to `…/SAMLAuthLauncher?finishEndpointParam=done`;
///     with that parameter `200` "signed in".
///   - `GET /sp/api/data` — `{"user": "<name>", "via": "saml"}`.
///   - every `SMPEndpoint` (registration, APPCID, CSRF) below `/sp`, on the session's SMP session
///     (counted like `"POST /sp/odata/Connections"` besides `"ANY /sp"`).
func addServiceProviderRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    let mount = WebMount(prefix: "/sp", cookieName: "SP_SESSION", sessions: state.spSessions)

    mount.route(on: router, state: state) { request, view -> Response in
        if view.path == "/saml/acs" {
            return try await assertionConsumer(request, view: view, mount: mount, configuration: configuration, state: state)
        }
        if let answer = try await OTPStage.handle(
            request, view: view, mount: mount, otp: state.otp, codeSource: passcodeSource(configuration, state, request))
        {
            return answer
        }
        switch spGate(request, view: view, mount: mount, configuration: configuration, state: state) {
        case .closed(let answer):
            try await SimHTTP.drain(request.body)
            return answer
        case .open(_, let session):
            return try await protectedResource(request, view: view, session: session, state: state)
        }
    }
}

/// A SAML session (else the SAML challenge), then the OTP when `SPSettings.otp` is on.
private func spGate(
    _ request: Request, view: ExternalView, mount: WebMount, configuration: SimulatorConfiguration, state: SimulatorState
) -> Gate {
    let settings = state.saml.settings
    guard let current = mount.session(of: request) else {
        return .closed(samlChallenge(view: view, settings: settings, idp: idpBase(configuration, state, request), saml: state.saml))
    }
    let registering = request.method == .post && view.path.hasSuffix("/Connections")
    if settings.otp == .afterSAML || (settings.otp == .forRegistration && registering),
        let challenge = OTPStage.require(current, view: view, mount: mount, otp: state.otp)
    {
        return .closed(challenge)
    }
    return .open(id: current.id, session: current.session)
}

/// The SAML2 challenge for the requested resource (its external URL is the RelayState).
private func samlChallenge(view: ExternalView, settings: SPSettings, idp: String, saml: SAMLState) -> Response {
    let authnRequest = AuthnRequest(acsURL: view.url("/saml/acs"), issuer: view.base, destination: idp + "/idp/sso")
    saml.countAuthnRequest()
    let relayState = view.resourceURL
    var response: Response
    switch settings.binding {
    case .postForm:
        response = SimHTTP.html(
            page(
                title: "Signing in",
                body: """
                    <form method="post" action="\(SimHTTP.htmlEscape(idp + "/idp/sso"))">
                        <input type="hidden" name="SAMLRequest" value="\(SimHTTP.htmlEscape(authnRequest.encoded))">
                        <input type="hidden" name="RelayState" value="\(SimHTTP.htmlEscape(relayState))">
                        <noscript><button type="submit">Continue</button></noscript>
                      </form>
                    """,
                onload: "document.forms[0].submit()"))
    case .redirect:
        response = .redirect(
            idp + "/idp/sso?SAMLRequest=" + SimHTTP.formEncode(authnRequest.encoded) + "&RelayState="
                + SimHTTP.formEncode(relayState))
    }
    if settings.identifyingHeader {
        response.headers[.sapSecurityLogin] = "login-request"
    }
    return response
}

/// `POST /sp/saml/acs`: see `addServiceProviderRoutes`.
private func assertionConsumer(
    _ request: Request, view: ExternalView, mount: WebMount, configuration: SimulatorConfiguration, state: SimulatorState
) async throws -> Response {
    guard request.method == .post else {
        try await SimHTTP.drain(request.body)
        return SimHTTP.text("the ACS takes POST", status: .methodNotAllowed)
    }
    let fields = try await SimHTTP.formFields(request.body)
    let now = Date()
    let checked = SAMLResponseCheck.verify(
        fields["SAMLResponse"] ?? "", signingKey: state.saml.signingKey, acsURL: view.url("/saml/acs"), audience: view.base, now: now
    ).flatMap { assertion -> Result<VerifiedAssertion, SAMLRejection> in
        state.saml.useOnce(ids: [assertion.responseID, assertion.assertionID], expiry: assertion.notOnOrAfter, now: now)
            ? .success(assertion) : .failure(SAMLRejection("this SAML response was used before"))
    }
    switch checked {
    case .failure(let rejection):
        state.saml.countAssertion(accepted: false)
        return SimHTTP.text("SAML response rejected: \(rejection.reason)", status: .forbidden)
    case .success(let assertion):
        state.saml.countAssertion(accepted: true)
        let target = fields["RelayState"].flatMap { view.contains($0) ? $0 : nil } ?? view.url("/")
        let smpSession = state.smp.createSession(user: assertion.user)
        let (id, _) = mount.sessions.create(user: assertion.user, smpSession: smpSession, originalURL: target)
        let answer =
            state.saml.settings.otp == .afterSAML
            ? OTPStage.challenge(sessionID: id, originalURL: target, view: view, mount: mount, otp: state.otp)
            : .redirect(target)
        return answer.settingCookie(mount.sessionCookie(id, view: view, settings: state.saml.settings))
    }
}

/// What an authenticated (and, where required, OTP-verified) session gets below `/sp`.
private func protectedResource(
    _ request: Request, view: ExternalView, session: WebSession, state: SimulatorState
) async throws -> Response {
    switch (view.path, request.method) {
    case ("/SAMLAuthLauncher", .get):
        guard view.queryParameters["finishEndpointParam"] != nil else {
            return .redirect(view.url("/SAMLAuthLauncher?finishEndpointParam=done"))
        }
        let user = SimHTTP.htmlEscape(session.user)
        return SimHTTP.html(page(title: "Signed in", body: "<h1>Signed in</h1><p id=\"signed-in\">signed in as \(user)</p>"))
    case ("/api/data", .get):
        return SimHTTP.json(UserDataAnswer(user: session.user, via: "saml"))
    default:
        guard let (endpoint, parameters) = SMPEndpoint.find(method: request.method, path: view.path[...]) else {
            try await SimHTTP.drain(request.body)
            return SimHTTP.text("not found", status: .notFound)
        }
        state.record(endpoint.recordKey(mount: "/sp"))
        let login = SMPLogin(session: session.smpSession ?? "", isNew: false)
        return try await endpoint.handle(request, parameters, login, state.smp)
    }
}
