public import Conversation
import ParleyEncoding

// Challenges only a person can answer: SAML2 (a login at an identity provider),
// OTP (a second factor) and Basic with a hosted form. Each filter turns the upstream's
// challenge into "interaction required"; the flow that follows is hosted by Parley.

/// Recognises a SAML2 challenge (seed: HttpConvAuthFlows SAML2): the identifying
/// response header, an HTML form carrying `SAMLRequest`, or a redirect carrying it.
public struct SAML2Detector: Sendable {
    /// How much of an HTML body is read to look for the form; the rest streams on.
    public static let peekLimit = 64 * 1024

    public let settings: SAML2Settings

    public init(settings: SAML2Settings) { self.settings = settings }

    public func isChallenge(_ response: inout UpstreamResponse) async throws -> Bool {
        if response.headers.contains(settings.identifyingHeader) { return true }
        if (300..<400).contains(response.status), let location = response.headers["Location"], Self.carriesSAMLRequest(location) {
            return true
        }
        guard let type = response.headers["Content-Type"]?.lowercased(), type.hasPrefix("text/html") else { return false }
        let head = try await response.peekBody(upTo: Self.peekLimit)
        return Self.htmlCarriesSAMLRequest(head)
    }

    /// A URL whose query has a `SAMLRequest` parameter.
    public static func carriesSAMLRequest(_ url: String) -> Bool {
        guard let q = url.firstIndex(of: "?") else { return false }
        return url[url.index(after: q)...].split(separator: "&").contains { $0.hasPrefix("SAMLRequest=") }
    }

    /// An HTML form with an input named `SAMLRequest` (the HTTP-POST binding).
    static func htmlCarriesSAMLRequest(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self).lowercased()
        guard text.contains("<form") else { return false }
        return text.contains("name=\"samlrequest\"") || text.contains("name='samlrequest'") || text.contains("name=samlrequest")
    }
}

/// A SAML2 challenge on an API call: a person must sign in at the identity provider.
public struct SAML2ChallengeFilter: ResponseFilter {
    let detector: SAML2Detector

    public init(settings: SAML2Settings) { detector = SAML2Detector(settings: settings) }

    public func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        guard try await detector.isChallenge(&response) else { return .deliver }
        return .interactionRequired(InteractionRequest(kind: .saml2, url: request.url))
    }
}

/// Recognises the OTP challenge (seed: a `3xx` with `x-smp-authentication: otp-challenge`)
/// and builds the URL the OTP form is opened with.
public struct OTPDetector: Sendable {
    public let settings: OTPSettings

    public init(settings: OTPSettings) { self.settings = settings }

    /// The OTP form's absolute URL when `response` is an OTP challenge to a request for `url`.
    public func challengeLocation(_ response: UpstreamResponse, requestURL url: String) -> String? {
        guard (300..<400).contains(response.status),
            response.headers[settings.responseHeaderName]?.lowercased() == settings.responseHeaderValue.lowercased(),
            let location = response.headers["Location"], let absolute = URLParts.resolve(location, against: url)
        else { return nil }
        return absolute
    }

    /// The OTP form URL with the additional parameters (seed: `redirecttooriginalurl=false`).
    public func formURL(_ location: String) -> String {
        let extra = settings.additionalParams.sorted { $0.key < $1.key }.filter { !Self.query(of: location, has: $0.key) }
        guard !extra.isEmpty else { return location }
        let query = extra.map { Self.formComponent($0.key) + "=" + Self.formComponent($0.value) }.joined(separator: "&")
        return location + (location.contains("?") ? "&" : "?") + query
    }

    /// Whether a URL carries every finish parameter (seed: `finished=true`).
    public func isFinish(_ url: String) -> Bool {
        guard !settings.finishParams.isEmpty, let q = url.firstIndex(of: "?") else { return false }
        let pairs = Set(url[url.index(after: q)...].split(separator: "&").map(String.init))
        return settings.finishParams.allSatisfy { pairs.contains(Self.formComponent($0.key) + "=" + Self.formComponent($0.value)) }
    }

    static func query(of url: String, has name: String) -> Bool {
        guard let q = url.firstIndex(of: "?") else { return false }
        return url[url.index(after: q)...].split(separator: "&").contains { $0 == Substring(name) || $0.hasPrefix(name + "=") }
    }

    static func formComponent(_ text: String) -> String { PercentEncoding.encodeFormComponent(text) }
}

/// A second factor met by an API call: a person must enter a passcode.
public struct OTPChallengeFilter: ResponseFilter {
    let detector: OTPDetector

    public init(settings: OTPSettings) { detector = OTPDetector(settings: settings) }

    public func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        guard let location = detector.challengeLocation(response, requestURL: request.url) else { return .deliver }
        return .interactionRequired(InteractionRequest(kind: .otp, url: detector.formURL(location)))
    }
}

/// `basic: {form: true}`: when the held credentials failed (or none are held), a
/// person enters them in a hosted form. Placed after `BasicChallengeFilter`.
public struct BasicFormChallengeFilter: ChallengeFilter {
    public init() {}

    public func handle(_ challenge: Challenge, conversation: Conversation) async throws -> ChallengeDecision {
        guard challenge.protectionSpace.method == .basic else { return .notHandled }
        return .interactionRequired(InteractionRequest(kind: .basic, url: challenge.request.url))
    }
}

/// The kinds of flow the built-in filters ask for; each is hosted by a file of its own in
/// the server's `FlowKinds/`.
extension InteractionRequest.Kind {
    public static let oauth2 = Self(rawValue: "oauth2")
    public static let saml2 = Self(rawValue: "saml2")
    public static let otp = Self(rawValue: "otp")
    public static let basic = Self(rawValue: "basic")
}
