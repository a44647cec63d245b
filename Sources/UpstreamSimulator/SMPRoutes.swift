import ParleyEncoding
import Foundation
import Hummingbird
import ParleyCrypto

/// What a session-aware route accepted: a valid `SMPSESSION` cookie, or Basic credentials
/// that just opened a new session (whose cookie the response must carry).
struct SMPLogin {
    let session: String
    let isNew: Bool

    /// Adds `Set-Cookie: SMPSESSION=…` when the session was created by this request.
    func setCookie(on response: Response) -> Response {
        guard isNew else { return response }
        var response = response
        response.headers[values: .setCookie].append("\(SMPAuth.sessionCookie)=\(session); Path=/; HttpOnly")
        return response
    }
}

/// SMP-style authentication: Basic opens a session, the session cookie stands in for Basic.
enum SMPAuth {
    static let sessionCookie = "SMPSESSION"

    static func basicMatches(_ request: Request, _ configuration: SimulatorConfiguration) -> Bool {
        guard let credentials = SimHTTP.basicCredentials(request) else { return false }
        // Both compared, so the time taken does not tell which one was wrong.
        let user = SimHTTP.secretsMatch(credentials.user, configuration.basicUsername)
        let password = SimHTTP.secretsMatch(credentials.password, configuration.basicPassword)
        return user && password
    }

    /// A valid session cookie first, then a valid OAuth2 bearer token when `oauth` is given
    /// (an OAuth-protected SMP), then Basic; the last two create a session. nil means "challenge".
    static func authenticate(
        _ request: Request, _ configuration: SimulatorConfiguration, _ smp: SMPState, oauth: OAuthState? = nil
    ) -> SMPLogin? {
        if let session = SimHTTP.cookie(sessionCookie, in: request), smp.isValidSession(session) {
            return SMPLogin(session: session, isNew: false)
        }
        if let oauth, let token = SimHTTP.bearerToken(request), let access = oauth.validate(accessToken: token) {
            return SMPLogin(session: smp.createSession(user: access.subject), isNew: true)
        }
        guard basicMatches(request, configuration) else { return nil }
        return SMPLogin(session: smp.createSession(user: configuration.basicUsername), isNew: true)
    }

    /// `401` with `WWW-Authenticate: Basic realm="…"`.
    static func challengeResponse(_ configuration: SimulatorConfiguration) -> Response {
        SimHTTP.text(
            "authentication required", status: .unauthorized,
            headers: [.wwwAuthenticate: "Basic realm=\"\(configuration.basicRealm)\""])
    }

    /// The challenge of a session-aware route, counted.
    static func challenge(_ configuration: SimulatorConfiguration, _ smp: SMPState) -> Response {
        smp.countBasicChallenge()
        return challengeResponse(configuration)
    }
}

private struct RegistrationAnswer: Encodable {
    struct D: Encodable {
        let applicationConnectionId: String
        let deviceType: String?
        let deviceModel: String?

        enum CodingKeys: String, CodingKey {
            case applicationConnectionId = "ApplicationConnectionId"
            case deviceType = "DeviceType"
            case deviceModel = "DeviceModel"
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(applicationConnectionId, forKey: .applicationConnectionId)
            try container.encode(deviceType, forKey: .deviceType)  // null when absent
            try container.encode(deviceModel, forKey: .deviceModel)
        }
    }
    let d: D
}

private struct AppcidAnswer: Encodable {
    let appcid: String?
    let known: Bool

    enum CodingKeys: String, CodingKey { case appcid, known }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appcid, forKey: .appcid)  // null when absent
        try container.encode(known, forKey: .known)
    }
}

private struct DigestAnswer: Encodable {
    let bytes: Int
    let sha256: String
}

private struct ItemsAnswer: Encodable {
    let items: [String]
}

/// `Connections('<appcid>')`, percent-encoded or not.
private func appcid(fromSegment segment: String) -> String? {
    let decoded = segment.removingPercentEncoding ?? segment
    let prefix = "Connections('"
    let suffix = "')"
    guard decoded.hasPrefix(prefix), decoded.hasSuffix(suffix), decoded.count > prefix.count + suffix.count else { return nil }
    return String(decoded.dropFirst(prefix.count).dropLast(suffix.count))
}

/// `DeviceType`/`DeviceModel` of a registration body, at the top level or under OData's `d`.
private func deviceFields(_ bytes: [UInt8]) -> (type: String?, model: String?)? {
    if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return (nil, nil) }
    guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { return nil }
    let fields = (object["d"] as? [String: Any]) ?? object
    return (fields["DeviceType"] as? String, fields["DeviceModel"] as? String)
}

/// Part A of the simulator: SMP sessions, registrations, APPCID, CSRF and Basic-only uploads.
///
/// - `POST /odata/applications/latest/{appId}/Connections` — Basic or session: `201`,
///   `Set-Cookie: X-SMP-APPCID=<uuid>`, `{"d":{"ApplicationConnectionId","DeviceType","DeviceModel"}}`.
/// - `DELETE /odata/applications/latest/{appId}/Connections('{appcid}')` — `200`, or `404` when unknown.
/// - `GET /api/appcid` — `{"appcid": <X-SMP-APPCID header or null>, "known": bool}`.
/// - `ANY /csrf/items` — `X-CSRF-Token: Fetch` on GET/HEAD mints the session's token;
///   POST/PUT/PATCH/DELETE need it (`403` + `X-CSRF-Token: Required` otherwise).
/// - `POST|PUT /secure/upload` — Basic only; drains the body before a `401`, hashes it otherwise.
func addSMPRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    let smp = state.smp

    router.post("/odata/applications/latest/{appId}/Connections") { request, context -> Response in
        state.record("POST /odata/Connections")
        guard let login = SMPAuth.authenticate(request, configuration, smp, oauth: state.oauth) else {
            try await SimHTTP.drain(request.body)
            return SMPAuth.challenge(configuration, smp)
        }
        let appId = context.parameters.get("appId").map { $0.removingPercentEncoding ?? $0 } ?? ""
        guard let device = deviceFields(try await SimHTTP.collect(request.body)) else {
            return SimHTTP.text("registration body must be a JSON object", status: .badRequest)
        }
        let registration = smp.register(appId: appId, deviceType: device.type, deviceModel: device.model)
        var response = SimHTTP.json(
            RegistrationAnswer(
                d: .init(
                    applicationConnectionId: registration.appcid, deviceType: device.type, deviceModel: device.model)),
            status: .created
        )
        response.headers[values: .setCookie].append("X-SMP-APPCID=\(registration.appcid); Path=/; HttpOnly")
        return login.setCookie(on: response)
    }

    router.delete("/odata/applications/latest/{appId}/{connection}") { request, context -> Response in
        state.record("DELETE /odata/Connections")
        guard let login = SMPAuth.authenticate(request, configuration, smp, oauth: state.oauth) else {
            return SMPAuth.challenge(configuration, smp)
        }
        let appId = context.parameters.get("appId").map { $0.removingPercentEncoding ?? $0 } ?? ""
        guard let appcid = context.parameters.get("connection").flatMap(appcid(fromSegment:)),
            smp.deleteRegistration(appcid: appcid, appId: appId)
        else {
            return login.setCookie(on: SimHTTP.text("no such registration", status: .notFound))
        }
        return login.setCookie(on: SimHTTP.text("deleted"))
    }

    router.get("/api/appcid") { request, _ -> Response in
        state.record("GET /api/appcid")
        guard let login = SMPAuth.authenticate(request, configuration, smp) else {
            return SMPAuth.challenge(configuration, smp)
        }
        let appcid = request.headers[.smpAppcid]
        return login.setCookie(on: SimHTTP.json(AppcidAnswer(appcid: appcid, known: appcid.map(smp.isKnown(appcid:)) ?? false)))
    }

    let csrfHeader = HeaderField.Name.csrfToken
    let csrfMethods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete]
    for method in csrfMethods {
        router.on("/csrf/items", method: method) { request, _ -> Response in
            state.record("ANY /csrf/items")
            guard let login = SMPAuth.authenticate(request, configuration, smp) else {
                try await SimHTTP.drain(request.body)
                return SMPAuth.challenge(configuration, smp)
            }
            let presented = request.headers[csrfHeader]
            if method == .get || method == .head {
                var response = SimHTTP.json(ItemsAnswer(items: []))
                if presented?.lowercased() == "fetch", let token = smp.fetchCSRFToken(session: login.session) {
                    response.headers[csrfHeader] = token
                }
                return login.setCookie(on: response)
            }
            guard smp.checkCSRFToken(session: login.session, presented: presented) else {
                try await SimHTTP.drain(request.body)
                return login.setCookie(
                    on: SimHTTP.text("CSRF token validation failed", status: .forbidden, headers: [csrfHeader: "Required"]))
            }
            let (count, digest) = try await SimHTTP.digest(request.body)
            return login.setCookie(on: SimHTTP.json(DigestAnswer(bytes: count, sha256: digest), status: method == .post ? .created : .ok))
        }
    }

    for method in [HTTPRequest.Method.post, .put] {
        router.on("/secure/upload", method: method) { request, _ -> Response in
            state.record("\(method.rawValue) /secure/upload")
            guard SMPAuth.basicMatches(request, configuration) else {
                // The body is read to its end first: a client has to send it again after the challenge.
                try await SimHTTP.drain(request.body)
                smp.countSecureUpload(success: false)
                return SMPAuth.challengeResponse(configuration)
            }
            let (count, digest) = try await SimHTTP.digest(request.body)
            smp.countSecureUpload(success: true)
            return SimHTTP.json(DigestAnswer(bytes: count, sha256: digest))
        }
    }
}
