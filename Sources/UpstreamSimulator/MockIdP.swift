import Foundation
import Hummingbird

/// The mock SAML identity provider, which browsers reach directly (never through Parley).
/// Its one user is the Basic user (`alice` / `wonderland` by default).
///
/// - `GET|POST /idp/sso` (`SAMLRequest`, `RelayState`) — `400` "ACS URL not registered" unless the
///   AuthnRequest's `AssertionConsumerServiceURL` is registered (`SAMLState.registeredACSURLs`,
///   `POST /control/saml/acs`); `400` for a request it cannot read; the login page otherwise.
/// - `POST /idp/login` (`username`, `password`, `SAMLRequest`, `RelayState`) — right credentials:
///   a page that posts `SAMLResponse` and `RelayState` to the ACS URL by itself (and by its
///   "Continue" button); wrong ones: the login page again with an error, `200`.
func addIdPRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    for method in [HTTPRequest.Method.get, .post] {
        router.on("/idp/sso", method: method) { request, _ -> Response in
            state.record("ANY /idp/sso")
            let fields =
                method == .get
                ? Dictionary(SimHTTP.formPairs(request.uri.query ?? "").map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
                : try await SimHTTP.formFields(request.body)
            switch checkedAuthnRequest(fields, state.saml) {
            case .failure(let refusal): return refusal.response
            case .success(let authnRequest): return loginPage(authnRequest, fields: fields, error: nil, configuration)
            }
        }
    }

    router.post("/idp/login") { request, _ -> Response in
        state.record("POST /idp/login")
        let fields = try await SimHTTP.formFields(request.body)
        let authnRequest: AuthnRequest
        switch checkedAuthnRequest(fields, state.saml) {
        case .failure(let refusal): return refusal.response
        case .success(let checked): authnRequest = checked
        }
        // Both compared, so the time taken does not tell which one was wrong.
        let userOK = SimHTTP.secretsMatch(fields["username"] ?? "", configuration.basicUsername)
        let passwordOK = SimHTTP.secretsMatch(fields["password"] ?? "", configuration.basicPassword)
        guard userOK && passwordOK else {
            state.saml.countIdPLogin(success: false)
            return loginPage(authnRequest, fields: fields, error: "Wrong user name or password.", configuration)
        }
        state.saml.countIdPLogin(success: true)
        let response = SAMLResponseMessage(
            request: authnRequest, idpEntityID: idpBase(configuration, state, request) + "/idp", user: configuration.basicUsername,
            lifetime: configuration.samlAssertionLifetime, now: Date())
        return autoPostPage(
            to: authnRequest.acsURL, samlResponse: response.encoded(signingKey: state.saml.signingKey), relayState: fields["RelayState"])
    }
}

/// The AuthnRequest in `SAMLRequest` when it is readable and names a registered ACS URL; the
/// `400` page otherwise.
private func checkedAuthnRequest(_ fields: [String: String], _ saml: SAMLState) -> Result<AuthnRequest, IdPRefusal> {
    guard let authnRequest = fields["SAMLRequest"].flatMap(AuthnRequest.init(encoded:)) else {
        return .failure(IdPRefusal(message: "SAMLRequest is missing or not a SAML 2.0 AuthnRequest"))
    }
    guard saml.isRegistered(acsURL: authnRequest.acsURL) else {
        saml.countUnregisteredACS()
        return .failure(IdPRefusal(message: "ACS URL not registered: \(authnRequest.acsURL)"))
    }
    return .success(authnRequest)
}

/// The IdP's `400` page.
private struct IdPRefusal: Error {
    let message: String

    var response: Response {
        SimHTTP.html(
            page(title: "Sign-in error", body: "<h1>Sign-in error</h1><p id=\"error\">\(SimHTTP.htmlEscape(message))</p>"),
            status: .badRequest)
    }
}

private func loginPage(
    _ authnRequest: AuthnRequest, fields: [String: String], error: String?, _ configuration: SimulatorConfiguration
) -> Response {
    let errorLine = error.map { "<p id=\"error\" role=\"alert\">\(SimHTTP.htmlEscape($0))</p>" } ?? ""
    return SimHTTP.html(
        page(
            title: "Sign in",
            body: """
                <h1>Sign in</h1>
                  <p>to <b>\(SimHTTP.htmlEscape(authnRequest.issuer))</b></p>
                  \(errorLine)
                  \(demoUserHint(configuration))
                  <form method="post" action="/idp/login">
                    \(hiddenInputs([("SAMLRequest", fields["SAMLRequest"]), ("RelayState", fields["RelayState"])]))
                    <label for="username">User name</label>
                    <input id="username" name="username" autocomplete="username" required>
                    <label for="password">Password</label>
                    <input id="password" name="password" type="password" autocomplete="current-password" required>
                    <button id="login" type="submit">Sign in</button>
                  </form>
                """))
}

/// Posts `SAMLResponse` (and `RelayState`) to the ACS on load; "Continue" does it without script.
private func autoPostPage(to acsURL: String, samlResponse: String, relayState: String?) -> Response {
    SimHTTP.html(
        page(
            title: "Signing in",
            body: """
                <form method="post" action="\(SimHTTP.htmlEscape(acsURL))">
                    \(hiddenInputs([("SAMLResponse", samlResponse), ("RelayState", relayState)]))
                    <button id="continue" type="submit">Continue</button>
                  </form>
                """,
            onload: "document.forms[0].submit()"))
}

private func hiddenInputs(_ fields: [(String, String?)]) -> String {
    fields.compactMap { name, value in
        value.map { "<input type=\"hidden\" name=\"\(name)\" value=\"\(SimHTTP.htmlEscape($0))\">" }
    }.joined(separator: "\n        ")
}
