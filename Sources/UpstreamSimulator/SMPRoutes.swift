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

/// One SMP endpoint, mountable at the root (Basic, `SMPSESSION` cookie or bearer token) and
/// below `/sp` (SAML session, `SAMLServiceProvider.swift`): where it lives below the mount and
/// what it answers an authenticated caller. The mount authenticates; the endpoint never does.
struct SMPEndpoint: Sendable {
    typealias Handler = @Sendable (_ request: Request, _ parameters: [String: String], _ login: SMPLogin, _ smp: SMPState)
        async throws -> Response

    /// Counted as `"<label> <mount><route>"`, e.g. `"POST /odata/Connections"` at the root.
    let label: String
    let route: String
    let methods: [HTTPRequest.Method]
    /// Path below the mount; a `{name}` segment captures one raw (still percent-encoded) segment.
    let pattern: String
    /// Whether an OAuth2 bearer token may open the session at the root mount.
    let acceptsBearer: Bool
    let handle: Handler

    func recordKey(mount: String) -> String { "\(label) \(mount)\(route)" }

    /// The `{name}` segments of `pattern`, in order.
    var parameterNames: [String] {
        pattern.split(separator: "/").compactMap { segment in
            segment.hasPrefix("{") && segment.hasSuffix("}") ? String(segment.dropFirst().dropLast()) : nil
        }
    }

    /// The captured segments when `method` and `path` (below the mount) match; nil otherwise.
    func match(method: HTTPRequest.Method, path: Substring) -> [String: String]? {
        guard methods.contains(method) else { return nil }
        let want = pattern.split(separator: "/", omittingEmptySubsequences: false)
        let have = path.split(separator: "/", omittingEmptySubsequences: false)
        guard want.count == have.count else { return nil }
        var captured: [String: String] = [:]
        for (expected, actual) in zip(want, have) {
            if expected.hasPrefix("{") && expected.hasSuffix("}") {
                guard !actual.isEmpty else { return nil }
                captured[String(expected.dropFirst().dropLast())] = String(actual)
            } else if expected != actual {
                return nil
            }
        }
        return captured
    }

    /// The endpoint and its captures for a request below a mount.
    static func find(method: HTTPRequest.Method, path: Substring) -> (SMPEndpoint, [String: String])? {
        for endpoint in all {
            if let parameters = endpoint.match(method: method, path: path) { return (endpoint, parameters) }
        }
        return nil
    }

    /// Every SMP endpoint (Basic-only `/secure/upload` is not among them: it never takes a session).
    static let all: [SMPEndpoint] = [register, deleteRegistration, appcidLookup, csrfItems]

    /// `POST /odata/applications/latest/{appId}/Connections` — `201`, `Set-Cookie: X-SMP-APPCID=<uuid>`,
    /// `{"d":{"ApplicationConnectionId","DeviceType","DeviceModel"}}`.
    static let register = SMPEndpoint(
        label: "POST", route: "/odata/Connections", methods: [.post],
        pattern: "/odata/applications/latest/{appId}/Connections", acceptsBearer: true
    ) { request, parameters, _, smp in
        let appId = parameters["appId"].map { $0.removingPercentEncoding ?? $0 } ?? ""
        guard let device = deviceFields(try await SimHTTP.collect(request.body)) else {
            return SimHTTP.text("registration body must be a JSON object", status: .badRequest)
        }
        let registration = smp.register(appId: appId, deviceType: device.type, deviceModel: device.model)
        var response = SimHTTP.json(
            RegistrationAnswer(
                d: .init(applicationConnectionId: registration.appcid, deviceType: device.type, deviceModel: device.model)),
            status: .created
        )
        response.headers[values: .setCookie].append("X-SMP-APPCID=\(registration.appcid); Path=/; HttpOnly")
        return response
    }

    /// `DELETE /odata/applications/latest/{appId}/Connections('{appcid}')` — `200`, or `404` when unknown.
    static let deleteRegistration = SMPEndpoint(
        label: "DELETE", route: "/odata/Connections", methods: [.delete],
        pattern: "/odata/applications/latest/{appId}/{connection}", acceptsBearer: true
    ) { _, parameters, _, smp in
        let appId = parameters["appId"].map { $0.removingPercentEncoding ?? $0 } ?? ""
        guard let appcid = parameters["connection"].flatMap(appcid(fromSegment:)),
            smp.deleteRegistration(appcid: appcid, appId: appId)
        else {
            return SimHTTP.text("no such registration", status: .notFound)
        }
        return SimHTTP.text("deleted")
    }

    /// `GET /api/appcid` — `{"appcid": <X-SMP-APPCID header or null>, "known": bool}`.
    static let appcidLookup = SMPEndpoint(
        label: "GET", route: "/api/appcid", methods: [.get], pattern: "/api/appcid", acceptsBearer: false
    ) { request, _, _, smp in
        let appcid = request.headers[.smpAppcid]
        return SimHTTP.json(AppcidAnswer(appcid: appcid, known: appcid.map(smp.isKnown(appcid:)) ?? false))
    }

    /// `ANY /csrf/items` — `X-CSRF-Token: Fetch` on GET/HEAD mints the session's token;
    /// POST/PUT/PATCH/DELETE need it (`403` + `X-CSRF-Token: Required` otherwise).
    static let csrfItems = SMPEndpoint(
        label: "ANY", route: "/csrf/items", methods: [.get, .head, .post, .put, .patch, .delete],
        pattern: "/csrf/items", acceptsBearer: false
    ) { request, _, login, smp in
        let csrfHeader = HeaderField.Name.csrfToken
        let presented = request.headers[csrfHeader]
        if request.method == .get || request.method == .head {
            var response = SimHTTP.json(ItemsAnswer(items: []))
            if presented?.lowercased() == "fetch", let token = smp.fetchCSRFToken(session: login.session) {
                response.headers[csrfHeader] = token
            }
            return response
        }
        guard smp.checkCSRFToken(session: login.session, presented: presented) else {
            try await SimHTTP.drain(request.body)
            return SimHTTP.text("CSRF token validation failed", status: .forbidden, headers: [csrfHeader: "Required"])
        }
        let (count, digest) = try await SimHTTP.digest(request.body)
        return SimHTTP.json(DigestAnswer(bytes: count, sha256: digest), status: request.method == .post ? .created : .ok)
    }
}

/// Part A of the simulator: SMP sessions, registrations, APPCID, CSRF and Basic-only uploads.
///
/// - Every `SMPEndpoint` at the root, authenticated by Basic or `SMPSESSION` (and a bearer token
///   where `acceptsBearer`); `401` + `WWW-Authenticate: Basic realm="…"` otherwise.
/// - `POST|PUT /secure/upload` — Basic only; drains the body before a `401`, hashes it otherwise.
func addSMPRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    let smp = state.smp

    for endpoint in SMPEndpoint.all {
        let names = endpoint.parameterNames
        for method in endpoint.methods {
            router.on(RouterPath(endpoint.pattern), method: method) { request, context -> Response in
                state.record(endpoint.recordKey(mount: ""))
                guard let login = SMPAuth.authenticate(request, configuration, smp, oauth: endpoint.acceptsBearer ? state.oauth : nil)
                else {
                    try await SimHTTP.drain(request.body)
                    return SMPAuth.challenge(configuration, smp)
                }
                var parameters: [String: String] = [:]
                for name in names { parameters[name] = context.parameters.get(name) }
                return login.setCookie(on: try await endpoint.handle(request, parameters, login, smp))
            }
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
