import Hummingbird

/// A protected area at `/basic-otp` with two factors: HTTP Basic, then the OTP stage, both on the
/// `BO_SESSION` cookie (`Path=/basic-otp`, or as `SPSettings.cookieScope` and `cookieDomain` say,
/// shared with `/sp`). External URLs follow `ExternalView` with the mount `/basic-otp`.
///
/// - `/basic-otp/otp`, `/basic-otp/otp/finished` — the OTP stage (`OTPStage`).
/// - Anything else: a valid `BO_SESSION`, or Basic credentials that open one (else `401` +
///   `WWW-Authenticate: Basic realm="basic-otp"`); while OTP is pending, the OTP challenge
///   (`302` to `{base}/otp`, `x-smp-authentication: otp-challenge`). Then:
///   - `GET /basic-otp/api/data` — `{"user": "<name>", "via": "basic-otp"}`.
func addBasicOTPRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    let mount = WebMount(prefix: "/basic-otp", cookieName: "BO_SESSION", sessions: state.basicOTPSessions)

    mount.route(on: router, state: state) { request, view -> Response in
        if let answer = try await OTPStage.handle(
            request, view: view, mount: mount, otp: state.otp, codeSource: passcodeSource(configuration, state, request))
        {
            return answer
        }
        let (gate, newCookie) = basicOTPGate(
            request, view: view, mount: mount, configuration: configuration, settings: state.saml.settings, otp: state.otp)
        switch gate {
        case .closed(let answer):
            try await SimHTTP.drain(request.body)
            return answer.settingCookie(newCookie)
        case .open(_, let session):
            guard view.path == "/api/data", request.method == .get else {
                try await SimHTTP.drain(request.body)
                return SimHTTP.text("not found", status: .notFound).settingCookie(newCookie)
            }
            return SimHTTP.json(UserDataAnswer(user: session.user, via: "basic-otp")).settingCookie(newCookie)
        }
    }
}

/// A session from the cookie or from Basic (then its `Set-Cookie` value comes along, scoped as
/// `settings` say), then the OTP.
private func basicOTPGate(
    _ request: Request, view: ExternalView, mount: WebMount, configuration: SimulatorConfiguration, settings: SPSettings,
    otp: OTPState
) -> (Gate, newCookie: String?) {
    var newCookie: String?
    let current: (id: String, session: WebSession)
    if let existing = mount.session(of: request) {
        current = existing
    } else if SMPAuth.basicMatches(request, configuration) {
        current = mount.sessions.create(user: configuration.basicUsername, smpSession: nil, originalURL: nil)
        newCookie = mount.sessionCookie(current.id, view: view, settings: settings)
    } else {
        return (
            .closed(
                SimHTTP.text(
                    "authentication required", status: .unauthorized, headers: [.wwwAuthenticate: "Basic realm=\"basic-otp\""])),
            nil
        )
    }
    if let challenge = OTPStage.require(current, view: view, mount: mount, otp: otp) {
        return (.closed(challenge), newCookie)
    }
    return (.open(id: current.id, session: current.session), newCookie)
}
