import Foundation
import Hummingbird

/// A partial change of `SPSettings` (`POST /control/sp`); absent fields stay as they are.
private struct SPSettingsChange: Decodable {
    var binding: SAMLBinding?
    var identifyingHeader: Bool?
    var otp: SPOTPMode?
    var cookieScope: SPCookieScope?
    var cookieDomain: Bool?
}

private struct OTPCodeAnswer: Encodable {
    let code: String
}

/// Test controls, without authentication (the simulator only ever listens on a test machine).
///
/// - `POST /sim/csrf/rotate` — every CSRF token stops working.
/// - `POST /sim/sessions/expire` — every `SMPSESSION`, `SP_SESSION`, `BO_SESSION` and the OAuth2
///   authorization server's `AS_SESSION` stops working.
/// - `POST /sim/oauth/expire-access-tokens` — every access token issued so far is expired.
/// - `POST /sim/oauth/trust-saml-metadata` with SAML metadata — the authorization server trusts
///   its `X509Certificate`s for SAML bearer assertions (RFC 7522).
/// - `POST /sim/oauth/trust-jwks` with a JWK Set — the authorization server also trusts its keys
///   for JWT bearer assertions (RFC 7523), as an administrator trusts Parley's `/.well-known/jwks.json`.
/// - `POST /sim/oauth/revoke-refresh-tokens` — every refresh token issued so far is revoked.
/// - `POST /sim/oauth/fail-token?status=503&count=N&retryAfter=S` — the next N token calls fail.
/// - `POST /sim/oauth/token-delay?ms=N` — the token endpoint waits N ms before answering.
/// - `GET /sim/stats` — `SimulatorStats` as JSON.
/// - `GET /control/sp` — the `/sp` settings `{"binding","identifyingHeader","otp","cookieScope","cookieDomain"}`
///   (`SPSettings`; the cookie ones also scope `/basic-otp`'s cookie); `POST /control/sp` with any
///   of them as JSON changes them (`400` for unknown values).
/// - `GET /control/saml/acs` — the ACS URLs the IdP accepts; `POST /control/saml/acs` with a
///   JSON array of strings replaces them.
/// - `GET /control/otp/code?user=alice` — `{"code":"123456"}`, the user's current passcode.
func addControlRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    router.post("/sim/csrf/rotate") { _, _ -> Response in
        state.record("POST /sim/csrf/rotate")
        state.smp.rotateCSRFTokens()
        return Response(status: .noContent)
    }

    router.post("/sim/sessions/expire") { _, _ -> Response in
        state.record("POST /sim/sessions/expire")
        state.expireSessions()
        return Response(status: .noContent)
    }

    router.post("/sim/oauth/trust-jwks") { request, _ -> Response in
        state.record("POST /sim/oauth/trust-jwks")
        let body = try await request.body.collect(upTo: 256 * 1024)
        let bytes = Array(buffer: body)
        guard (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any] else {
            return SimHTTP.text("expected a JWK Set (JSON)", status: .badRequest)
        }
        state.oauth.trustedAssertionKeys = bytes
        return SimHTTP.text("trusted")
    }

    router.post("/sim/oauth/trust-saml-metadata") { request, _ -> Response in
        state.record("POST /sim/oauth/trust-saml-metadata")
        let body = String(buffer: try await request.body.collect(upTo: 256 * 1024))
        let certificates = samlMetadataCertificates(body)
        guard !certificates.isEmpty else { return SimHTTP.text("expected SAML metadata with an X509Certificate", status: .badRequest) }
        state.oauth.trustedSAMLCertificates = certificates
        return SimHTTP.text("trusted \(certificates.count)")
    }

    router.post("/sim/oauth/expire-access-tokens") { _, _ -> Response in
        state.record("POST /sim/oauth/expire-access-tokens")
        state.oauth.expireAccessTokens()
        return Response(status: .noContent)
    }

    router.post("/sim/oauth/revoke-refresh-tokens") { _, _ -> Response in
        state.record("POST /sim/oauth/revoke-refresh-tokens")
        state.oauth.revokeRefreshTokens()
        return Response(status: .noContent)
    }

    router.post("/sim/oauth/fail-token") { request, _ -> Response in
        state.record("POST /sim/oauth/fail-token")
        let query = request.uri.queryParameters
        let status = query["status"].flatMap { Int($0) } ?? 503
        let count = query["count"].flatMap { Int($0) } ?? 1
        let retryAfter = query["retryAfter"].flatMap { Int($0) }
        guard (400...599).contains(status), (0...10_000).contains(count), (retryAfter ?? 0) >= 0 else {
            return SimHTTP.text("status must be in 400...599, count in 0...10000, retryAfter >= 0", status: .badRequest)
        }
        let error = query["error"].map(String.init) ?? (status >= 500 ? "temporarily_unavailable" : "invalid_request")
        state.oauth.failNextTokenCalls(count: count, status: status, retryAfter: retryAfter, error: error)
        return Response(status: .noContent)
    }

    router.post("/sim/oauth/token-delay") { request, _ -> Response in
        state.record("POST /sim/oauth/token-delay")
        let ms = request.uri.queryParameters["ms"].flatMap { Int($0) } ?? 0
        guard (0...configuration.maxSlowMilliseconds).contains(ms) else {
            return SimHTTP.text("ms must be in 0...\(configuration.maxSlowMilliseconds)", status: .badRequest)
        }
        state.oauth.setTokenDelay(.milliseconds(ms))
        return Response(status: .noContent)
    }

    router.get("/sim/stats") { _, _ -> Response in
        state.record("GET /sim/stats")
        return SimHTTP.json(state.stats)
    }

    router.get("/control/sp") { _, _ -> Response in
        state.record("GET /control/sp")
        return SimHTTP.json(state.saml.settings)
    }

    router.post("/control/sp") { request, _ -> Response in
        state.record("POST /control/sp")
        let body = try await SimHTTP.collect(request.body)
        guard let change = try? JSONDecoder().decode(SPSettingsChange.self, from: Data(body)) else {
            return SimHTTP.text(
                #"expected JSON like {"binding":"postForm|redirect","identifyingHeader":true,"otp":"off|afterSAML|forRegistration","#
                    + #""cookieScope":"mount|forwardedPrefix|forwardedPrefixSlash","cookieDomain":false}"#,
                status: .badRequest)
        }
        state.saml.updateSettings { settings in
            if let binding = change.binding { settings.binding = binding }
            if let identifyingHeader = change.identifyingHeader { settings.identifyingHeader = identifyingHeader }
            if let otp = change.otp { settings.otp = otp }
            if let cookieScope = change.cookieScope { settings.cookieScope = cookieScope }
            if let cookieDomain = change.cookieDomain { settings.cookieDomain = cookieDomain }
        }
        return Response(status: .noContent)
    }

    router.get("/control/saml/acs") { _, _ -> Response in
        state.record("GET /control/saml/acs")
        return SimHTTP.json(state.saml.registeredACSURLs)
    }

    router.post("/control/saml/acs") { request, _ -> Response in
        state.record("POST /control/saml/acs")
        let body = try await SimHTTP.collect(request.body)
        guard let urls = try? JSONDecoder().decode([String].self, from: Data(body)) else {
            return SimHTTP.text("expected a JSON array of ACS URLs", status: .badRequest)
        }
        state.saml.registeredACSURLs = urls
        return Response(status: .noContent)
    }

    router.get("/control/otp/code") { request, _ -> Response in
        state.record("GET /control/otp/code")
        guard let user = request.uri.queryParameters["user"].map(String.init), !user.isEmpty else {
            return SimHTTP.text("user is required", status: .badRequest)
        }
        return SimHTTP.json(OTPCodeAnswer(code: state.otp.currentCode(user: user)))
    }
}

/// Every `X509Certificate` in a metadata document, as PEM.
func samlMetadataCertificates(_ xml: String) -> [String] {
    guard let pattern = try? NSRegularExpression(pattern: "<(?:[A-Za-z0-9_]+:)?X509Certificate>([A-Za-z0-9+/=\\s]+)</") else { return [] }
    let range = NSRange(xml.startIndex..., in: xml)
    return pattern.matches(in: xml, range: range).compactMap { match in
        guard let body = Range(match.range(at: 1), in: xml) else { return nil }
        let der = xml[body].filter { !$0.isWhitespace }
        var lines: [String] = []
        var rest = Substring(der)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(64)))
            rest = rest.dropFirst(64)
        }
        return "-----BEGIN CERTIFICATE-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE-----\n"
    }
}
