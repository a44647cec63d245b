import ParleyCrypto
public import Conversation
import ParleyEncoding

/// A named upstream and how to authenticate to it (the seed's configurator input),
/// checked once at start: every block is typed, with the seeds' defaults applied.
/// A block that is absent is off (nil); present, even as `{}`, it is on.
/// A class: it never changes after start, and a proxied request carries it in its context
/// through every middleware, where a struct of its size was copied (and its many references
/// retained) at each step.
public final class Destination: Sendable {
    public let name: String
    /// How Parley's pages name the destination (`displayName`, default: the name).
    public let displayName: String
    /// The destination URL without a trailing slash.
    public let baseURL: String
    public let allowedReturnUrls: [String]
    public let smp: SMPSettings?
    public let csrfEnabled: Bool
    public let basic: BasicSettings?
    /// The largest proxied request body.
    public let requestBodyLimit: Int64
    /// The destination's shared certificate, decoded; a registration's own wins over it.
    public let clientCertificate: ClientCertificateMaterial?
    /// Extra trust anchors (PEM) for this upstream. Parley's addition: private CAs are common in SMP landscapes.
    public let caCertificate: String?
    public let timeouts: Timeouts
    public let saml2: SAML2Settings?
    public let otp: OTPSettings?
    public let oauth2: OAuth2Settings?
    /// Who may register.
    public let registrationPolicy: RegistrationPolicy
    /// Whether a registration must carry a valid identity token (`registration: {identity: required}`,
    /// the default on a destination with an interactive sign-in when the file lists identity
    /// providers); one without is `403 forbidden`.
    public let identityRequired: Bool
    /// Whether `registration: {identity: optional}` was written out on a destination with an
    /// interactive sign-in: a registration without a verified user can start a flow (warned at start).
    public let identityOptionalWithSignIn: Bool
    /// The claim of the registration's identity token that a flow's signed-in identity is compared
    /// with, exactly but for ASCII case (`identity: {match: …}`, default `sub`).
    public let identityMatchClaim: String
    /// The issuers of the identity providers whose users this destination accepts
    /// (`identity: {providers: […]}`); nil: every provider the file lists (a file that lists more
    /// than one must name them on every destination that uses identity).
    public let identityProviders: [String]?
    /// Whether an agent's JWT access token creates its (user, client) registration on first use
    /// (`registration: {implicit: true}`).
    public let implicitRegistrations: Bool
    /// The scopes an agent's access token must carry for this destination (`registration.scopes`).
    public let agentScopes: [String]
    /// Whether upstream requests carry W3C trace context (`traceparent`, `tracestate`) when traces are on.
    public let propagateTraceContext: Bool
    /// Calls that need an interactive sign-in at most so old (`stepUp`).
    public let stepUpRules: [StepUpRule]
    /// Where this destination's lifecycle events go (`webhooks`), besides the file's global ones.
    public let webhooks: [WebhookSubscription]
    /// How Parley's pages look for this destination (`branding`); nil: Parley's own look.
    public let branding: Branding?

    /// A destination's look on Parley's pages: a logo file (read, size- and type-checked by the
    /// server at start) and an accent colour (`#rrggbb`, lower case).
    public struct Branding: Sendable, Equatable {
        public let logo: String?
        public let accent: String?
    }

    public static let defaultMaxRequestBodyBytes: Int64 = 1 << 30

    /// Whether `returnUrl` is allowed: equal to an entry, or, for an entry ending in `*`,
    /// starting with the rest of it at a boundary: the prefix ends in `/`, `?` or `#`, or
    /// what follows it starts with one of them. `https://app/cb*` allows `https://app/cb`,
    /// `https://app/cb/done` and `https://app/cb?x=1`, not `https://app/cbx` nor, for
    /// `https://app*`, `https://app.evil.example`.
    public func allowsReturnURL(_ returnUrl: String) -> Bool {
        let boundaries: Set<Character> = ["/", "?", "#"]
        for entry in allowedReturnUrls {
            if entry.hasSuffix("*") {
                let prefix = entry.dropLast()
                guard returnUrl.hasPrefix(prefix) else { continue }
                let rest = returnUrl.dropFirst(prefix.count)
                if rest.isEmpty || prefix.last.map(boundaries.contains) == true || rest.first.map(boundaries.contains) == true {
                    return true
                }
            } else if entry == returnUrl {
                return true
            }
        }
        return false
    }

    /// Whether the destination holds credentials that every registration shares.
    public var holdsSharedCredentials: Bool {
        clientCertificate != nil || oauth2?.grant == .clientCredentials
    }

    fileprivate init(
        spec: DestinationSpec, baseURL: String, certificate: ClientCertificateMaterial?, timeouts: Timeouts, oauth2: OAuth2Settings?,
        policy: RegistrationPolicy, webhooks: [WebhookSubscription]
    ) {
        registrationPolicy = policy
        self.webhooks = webhooks
        identityRequired = spec.registration?.identity == "required"
        identityOptionalWithSignIn = spec.registration?.identity == "optional" && spec.hasInteractiveSignIn
        identityMatchClaim = spec.identity?.match ?? "sub"
        identityProviders = spec.identity?.providers
        implicitRegistrations = spec.registration?.implicit ?? false
        agentScopes = spec.registration?.scopes ?? []
        name = spec.name
        displayName = spec.displayName ?? spec.name
        branding = spec.branding.map { Branding(logo: $0.logo, accent: $0.accent?.lowercased()) }
        self.baseURL = baseURL
        allowedReturnUrls = spec.allowedReturnUrls ?? []
        smp = spec.smp.map { SMPSettings(appId: $0.appId) }
        csrfEnabled = spec.csrf ?? false
        basic = spec.basic.map { BasicSettings(form: $0.form ?? false) }
        requestBodyLimit = spec.maxRequestBodyBytes ?? Self.defaultMaxRequestBodyBytes
        clientCertificate = certificate
        caCertificate = spec.caCertificate
        self.timeouts = timeouts
        saml2 = spec.saml2.map(SAML2Settings.init(spec:))
        otp = spec.otp.map(OTPSettings.init(spec:))
        self.oauth2 = oauth2
        propagateTraceContext = spec.propagateTraceContext ?? false
        stepUpRules = (spec.stepUp ?? []).map {
            StepUpRule(
                methods: Set(($0.methods ?? []).map { $0.uppercased() }), pathPrefix: $0.pathPrefix,
                maxAge: .milliseconds(Int64(($0.maxAgeSeconds * 1000).rounded())))
        }
    }

    /// The first step-up rule that covers a call (its method, and its path below the destination
    /// URL, query and all); nil when none does.
    public func stepUpRule(method: String, path: String) -> StepUpRule? {
        stepUpRules.first { $0.covers(method: method, path: path) }
    }

    /// Whether this destination takes a user of `issuer` (one of its `identity.providers`, or
    /// any listed provider where it names none).
    public func acceptsIdentity(of issuer: String) -> Bool {
        identityProviders?.contains(issuer) ?? true
    }
}

/// A call that needs a recent interactive sign-in: its methods (empty: all) and path prefix,
/// and how old the registration's last sign-in may be. A rule covers the operation, not one
/// spelling of it: paths are compared in their canonical form (`canonicalPath`), and an OData
/// `$batch` is covered when the rule covers anything under its service root.
public struct StepUpRule: Sendable, Equatable {
    public let methods: Set<String>
    /// Canonical (`canonicalPath`): so `/API/Pay` or `/api;v=1/pay` cannot pass for `/api/pay` on an
    /// upstream that does not care (SAP's ICF and servlet containers do not).
    public let pathPrefix: String
    public let maxAge: Duration

    public init(methods: Set<String>, pathPrefix: String, maxAge: Duration) {
        self.methods = methods
        self.pathPrefix = Self.canonicalPath(pathPrefix)
        self.maxAge = maxAge
    }

    /// The path as the upstream's dispatcher reads it: the query dropped, each segment
    /// percent-decoded, its `;`-parameters removed (`/api;v=1/pay` → `/api/pay`) and SAP ICF's
    /// `(…)` suffix removed (`/sap(bD1lbg==)/opu` → `/sap/opu`), ASCII letters lower-cased.
    public static func canonicalPath(_ path: String) -> String {
        let beforeQuery = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let segments = beforeQuery.split(separator: "/", omittingEmptySubsequences: false).map { raw -> String in
            let decoded = PercentEncoding.decode(raw).map { String(decoding: $0, as: UTF8.self) } ?? String(raw)
            var segment = Substring(decoded)
            if let semicolon = segment.firstIndex(of: ";") { segment = segment[..<semicolon] }
            if segment.hasSuffix(")"), let open = segment.firstIndex(of: "("), open > segment.startIndex { segment = segment[..<open] }
            return String(decoding: segment.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
        }
        return segments.joined(separator: "/")
    }

    /// Whether the rule covers `method` on `path` (what follows the destination URL, query
    /// included): the canonical prefix ends at a segment boundary (`/api/pay` covers `/api/pay`,
    /// `/api/pay/1` and `/api;v=1/pay`, not `/api/payroll`). A `POST …/$batch` is covered, whatever
    /// the rule's methods, when the rule covers its service root or anything under it: a batch
    /// carries any operation of its service.
    public func covers(method: String, path: String) -> Bool {
        let canonical = Self.canonicalPath(path)
        if method.uppercased() == "POST", canonical.hasSuffix("/$batch") {
            let root = String(canonical.dropLast("/$batch".count))
            if Self.isUnder(root, pathPrefix) || Self.isUnder(pathPrefix, root) { return true }
        }
        guard methods.isEmpty || methods.contains(method.uppercased()) else { return false }
        return Self.isUnder(canonical, pathPrefix)
    }

    /// Whether `path` is `prefix` or below it, at a segment boundary.
    private static func isUnder(_ path: String, _ prefix: String) -> Bool {
        guard path.hasPrefix(prefix) else { return false }
        if prefix.hasSuffix("/") { return true }
        let rest = path.dropFirst(prefix.count)
        return rest.isEmpty || rest.first == "/"
    }
}

/// Who may register with a destination.
public enum RegistrationPolicy: Sendable, Equatable {
    /// Anyone who can reach Parley (the default).
    case open
    /// The registration call carries `Parley-Enrolment: <secret>`; only its SHA-256 is configured.
    case enrolment(secretSHA256: [UInt8])
    /// The registration waits as `pending_approval` until an administrator approves it.
    case approval
}

/// SMP registration: `POST {url}/odata/applications/latest/{appId}/Connections`.
public struct SMPSettings: Sendable, Equatable {
    public let appId: String
}

/// Basic authentication. `form`: a failure becomes a hosted credentials form.
public struct BasicSettings: Sendable, Equatable {
    public let form: Bool
}

/// SAML2 challenge and finish, with the seed's defaults.
public struct SAML2Settings: Sendable, Equatable {
    public let identifyingHeader: String
    public let finishEndpoint: String
    public let finishEndpointParam: String
    /// The identity provider's signing certificates (PEM, each checked at start): a
    /// `SAMLResponse` crossing `/web/{destination}/…` names who signed in only when its
    /// signature verifies against one of them. Empty: SAML sign-ins yield no identity.
    public let idpCertificates: [String]

    init(spec: DestinationSpec.SAML2) {
        identifyingHeader = spec.identifyingHeader ?? "com.sap.cloud.security.login"
        finishEndpoint = spec.finishEndpoint ?? "/SAMLAuthLauncher"
        finishEndpointParam = spec.finishEndpointParam ?? "finishEndpointParam"
        idpCertificates = spec.idpCertificates ?? []
    }
}

/// OTP challenge and finish, with the seed's defaults.
public struct OTPSettings: Sendable, Equatable {
    public let responseHeaderName: String
    public let responseHeaderValue: String
    public let additionalParams: [String: String]
    public let finishParams: [String: String]
    /// The OTP form's passcode field, for a passcode that arrives at `/callback/otp`.
    public let passcodeField: String

    init(spec: DestinationSpec.OTP) {
        responseHeaderName = spec.responseHeaderName ?? "x-smp-authentication"
        responseHeaderValue = spec.responseHeaderValue ?? "otp-challenge"
        additionalParams = spec.additionalParams ?? ["redirecttooriginalurl": "false"]
        finishParams = spec.finishParams ?? ["finished": "true"]
        passcodeField = spec.passcodeField ?? "passcode"
    }
}

/// A destination as written in the destinations file (YAML; JSON is YAML too): names and
/// strings as the operator typed them. `validated()` turns it into a `Destination` or
/// reports every problem at once.
public struct DestinationSpec: Sendable, Decodable, Equatable {
    public var name: String
    public var url: String
    /// How Parley's pages name the destination (default: `name`).
    public var displayName: String?
    public var allowedReturnUrls: [String]?
    public var smp: SMP?
    public var csrf: Bool?
    public var basic: Basic?
    public var maxRequestBodyBytes: Int64?
    public var clientCertificate: ClientCertificate?
    public var caCertificate: String?
    public var timeouts: TimeoutSettings?
    public var saml2: SAML2?
    public var otp: OTP?
    public var oauth2: OAuth2?
    public var registration: Registration?
    /// Which claim of the registration's identity token names the person a flow must sign in as.
    public var identity: Identity?
    /// Send `traceparent`/`tracestate` to this upstream (default false: trace ids stay inside).
    public var propagateTraceContext: Bool?
    /// Calls that need a recent interactive sign-in.
    public var stepUp: [StepUp]?
    /// Where this destination's lifecycle events go (besides the file's global `webhooks`).
    public var webhooks: [WebhookSpec]?
    /// The destination's look on Parley's pages.
    public var branding: Branding?

    public struct Branding: Sendable, Decodable, Equatable {
        /// The path of a PNG or JPEG file (at most `DestinationSpec.maxLogoBytes`).
        public var logo: String?
        /// `#rrggbb`.
        public var accent: String?
        public init(logo: String? = nil, accent: String? = nil) {
            self.logo = logo
            self.accent = accent
        }
    }

    public struct StepUp: Sendable, Decodable, Equatable {
        /// The methods the rule covers (default: every method).
        public var methods: [String]?
        /// The path below the destination URL the rule covers (with everything under it).
        public var pathPrefix: String
        public var maxAgeSeconds: Double
        public init(methods: [String]? = nil, pathPrefix: String, maxAgeSeconds: Double) {
            self.methods = methods
            self.pathPrefix = pathPrefix
            self.maxAgeSeconds = maxAgeSeconds
        }
    }

    public struct Registration: Sendable, Decodable, Equatable {
        public var policy: String?
        public var enrolmentSecretSha256: String?
        /// `required`: every registration carries a valid identity token; `optional` (the default).
        public var identity: String?
        /// Agents: a JWT access token of a listed identity provider for Parley's resource creates
        /// the registration of its (user, client) on first use.
        public var implicit: Bool?
        /// The scopes an agent's access token must carry to use the destination (every one of them).
        public var scopes: [String]?
        public init(
            policy: String? = nil, enrolmentSecretSha256: String? = nil, identity: String? = nil, implicit: Bool? = nil, scopes: [String]? = nil
        ) {
            self.policy = policy
            self.enrolmentSecretSha256 = enrolmentSecretSha256
            self.identity = identity
            self.implicit = implicit
            self.scopes = scopes
        }
    }

    public struct Identity: Sendable, Decodable, Equatable {
        /// The claim compared with a flow's signed-in identity (default `sub`).
        public var match: String?
        /// The issuers (of the file's `identityProviders`) whose users this destination accepts.
        public var providers: [String]?
        public init(match: String? = nil, providers: [String]? = nil) {
            self.match = match
            self.providers = providers
        }
    }

    /// Whether a person signs in for this destination's registrations in a browser: an OAuth2
    /// authorization code, SAML2, OTP, or Basic with a hosted form.
    public var hasInteractiveSignIn: Bool {
        oauth2.map { ($0.grant ?? "authorization_code") == "authorization_code" } == true || saml2 != nil || otp != nil
            || basic?.form == true
    }

    /// Whether this destination holds its users to an identity: it requires one, takes agents,
    /// speaks for the user (a propagation grant), compares sign-ins by a named claim, or lets a
    /// person sign in (whose sign-in is compared with a verified user's).
    var usesIdentity: Bool {
        registration?.identity == "required" || registration?.implicit == true || identity?.match != nil
            || identity?.providers != nil || hasInteractiveSignIn
            || ["token_exchange", "jwt_bearer", "saml2_bearer"].contains(oauth2?.grant ?? "")
    }

    /// Whether a grant of this destination sends an assertion Parley signs with the user's name in
    /// it: `jwt_bearer` with `assertion: parley`, `saml2_bearer`, or `token_exchange` for agents.
    var signsAssertionsForUsers: Bool {
        switch oauth2?.grant {
        case "jwt_bearer": oauth2?.assertion == "parley" || registration?.implicit == true
        case "saml2_bearer": true
        case "token_exchange": registration?.implicit == true
        default: false
        }
    }

    public struct SMP: Sendable, Decodable, Equatable {
        public var appId: String
        public init(appId: String) { self.appId = appId }
    }

    public struct Basic: Sendable, Decodable, Equatable {
        public var form: Bool?
        public init(form: Bool? = nil) { self.form = form }
    }

    public struct ClientCertificate: Sendable, Decodable, Equatable {
        /// Base64 PKCS#12.
        public var pkcs12: String
        public var password: String?
        public init(pkcs12: String, password: String?) {
            self.pkcs12 = pkcs12
            self.password = password
        }
    }

    public struct TimeoutSettings: Sendable, Decodable, Equatable {
        public var connectSeconds: Double?
        public var idleSeconds: Double?
        public var totalSeconds: Double?
        public init(connectSeconds: Double? = nil, idleSeconds: Double? = nil, totalSeconds: Double? = nil) {
            self.connectSeconds = connectSeconds
            self.idleSeconds = idleSeconds
            self.totalSeconds = totalSeconds
        }
    }

    public struct SAML2: Sendable, Decodable, Equatable {
        public var identifyingHeader: String?
        public var finishEndpoint: String?
        public var finishEndpointParam: String?
        /// PEM certificates whose keys sign the identity provider's SAML responses.
        public var idpCertificates: [String]?
        public init(
            identifyingHeader: String? = nil, finishEndpoint: String? = nil, finishEndpointParam: String? = nil, idpCertificates: [String]? = nil
        ) {
            self.identifyingHeader = identifyingHeader
            self.finishEndpoint = finishEndpoint
            self.finishEndpointParam = finishEndpointParam
            self.idpCertificates = idpCertificates
        }
    }

    public struct OTP: Sendable, Decodable, Equatable {
        public var responseHeaderName: String?
        public var responseHeaderValue: String?
        public var additionalParams: [String: String]?
        public var finishParams: [String: String]?
        /// Parley's addition: the OTP form's passcode field (default `passcode`).
        public var passcodeField: String?
        public init(
            responseHeaderName: String? = nil, responseHeaderValue: String? = nil, additionalParams: [String: String]? = nil,
            finishParams: [String: String]? = nil
        ) {
            self.responseHeaderName = responseHeaderName
            self.responseHeaderValue = responseHeaderValue
            self.additionalParams = additionalParams
            self.finishParams = finishParams
        }
    }

    public struct OAuth2: Sendable, Decodable, Equatable {
        public var grant: String?
        public var authorizationEndpoint: String?
        public var tokenEndpoint: String?
        public var revocationEndpoint: String?
        public var clientId: String?
        public var clientSecret: String?
        public var clientAuthentication: String?
        public var scopes: [String]?
        public var scopeKeys: [ScopeKeyRule]?
        public var challenge: Challenge?
        /// OpenID Connect: the authorization server's issuer (the `id_token`'s `iss`), its key set,
        /// and its userinfo endpoint; who signed in through an `authorization_code` flow.
        public var issuer: String?
        public var jwksUri: String?
        public var userinfoEndpoint: String?
        /// The `prompt` of authorization requests, for every registration (`""`: none); absent,
        /// `login` for registrations without a verified user and none for the others.
        public var prompt: String?
        /// Propagation (`token_exchange`, `jwt_bearer`): what the token is for (RFC 8693
        /// `audience`, `resource`), the identity token's type as `subject_token`, which assertion
        /// a JWT bearer grant sends, the `aud` of Parley's own assertion, and the claim of the
        /// identity token its `sub` is taken from.
        public var audience: String?
        public var resource: String?
        public var subjectTokenType: String?
        public var assertion: String?
        public var assertionAudience: String?
        public var subjectClaim: String?
        /// `saml2_bearer`: the assertion's `Audience` (the authorization server's entity id), its
        /// `NameID` format, and the identity token's claim that becomes the `NameID`.
        public var samlAudience: String?
        public var nameIdFormat: String?
        public var nameIdClaim: String?

        public struct Challenge: Sendable, Decodable, Equatable {
            public var statuses: [Int]?
            public var sapStatusHeader: Bool?
        }

        public init(
            grant: String?, authorizationEndpoint: String?, tokenEndpoint: String?, revocationEndpoint: String?, clientId: String?,
            clientSecret: String?, clientAuthentication: String?, scopes: [String]?, scopeKeys: [ScopeKeyRule]?, challenge: Challenge?,
            issuer: String? = nil, jwksUri: String? = nil, userinfoEndpoint: String? = nil
        ) {
            self.grant = grant
            self.authorizationEndpoint = authorizationEndpoint
            self.tokenEndpoint = tokenEndpoint
            self.revocationEndpoint = revocationEndpoint
            self.clientId = clientId
            self.clientSecret = clientSecret
            self.clientAuthentication = clientAuthentication
            self.scopes = scopes
            self.scopeKeys = scopeKeys
            self.challenge = challenge
            self.issuer = issuer
            self.jwksUri = jwksUri
            self.userinfoEndpoint = userinfoEndpoint
        }

        public struct ScopeKeyRule: Sendable, Decodable, Equatable {
            public var prefix: String
            public var key: String
        }
    }

    public init(
        name: String, url: String, csrf: Bool? = nil, basic: Basic? = nil, smp: SMP? = nil, maxRequestBodyBytes: Int64? = nil,
        allowedReturnUrls: [String]? = nil
    ) {
        self.name = name
        self.url = url
        self.csrf = csrf
        self.basic = basic
        self.smp = smp
        self.maxRequestBodyBytes = maxRequestBodyBytes
        self.allowedReturnUrls = allowedReturnUrls
    }

    public static let maxDisplayNameLength = 100

    /// A name a page can show: some visible text, at most 100 characters, no control characters.
    static func isDisplayName(_ text: String) -> Bool {
        text.count <= maxDisplayNameLength && text.contains { !$0.isWhitespace }
            && !text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// The largest logo file a destination's branding may name.
    public static let maxLogoBytes = 256 * 1024

    /// `#rrggbb` (hexadecimal digits of either case).
    static func isColour(_ text: String) -> Bool {
        text.utf8.count == 7 && text.hasPrefix("#") && Hex.decode(String(text.dropFirst()))?.count == 3
    }

    /// Every problem of one destination, reported together.
    public struct Invalid: Error, CustomStringConvertible {
        public let problems: [String]
        public var description: String { problems.joined(separator: "; ") }
    }

    /// The checked destination, or every problem with this entry. `listedProviders`: the issuers
    /// of the file's `identityProviders`. When there are any, `registration.identity` defaults to
    /// `required` on a destination with an interactive sign-in (consent phishing: without a
    /// verified user, whoever finishes the flow would become the registration's user), and a
    /// destination that uses identity must name its `identity.providers` when there is more than one.
    public func validated(listedProviders: [String] = []) throws(Invalid) -> Destination {
        var problems: [String] = []
        let label = "destination '\(name)'"
        var spec = self
        let defaulted = !listedProviders.isEmpty && registration?.identity == nil && hasInteractiveSignIn
        if defaulted {
            spec.registration = spec.registration ?? Registration()
            spec.registration?.identity = "required"
        }
        if !listedProviders.isEmpty {
            for issuer in identity?.providers ?? [] where !listedProviders.contains(issuer) {
                problems.append("\(label): identity.providers names '\(issuer.prefix(200))', which the file's identityProviders do not list")
            }
            if identity?.providers?.isEmpty == true {
                problems.append("\(label): identity.providers must name at least one of the file's identityProviders")
            }
            if Set(listedProviders).count > 1, identity?.providers == nil, spec.usesIdentity {
                problems.append(
                    "\(label): the file lists \(Set(listedProviders).count) identity providers, so a destination that uses identity must say whose users it takes (identity: {providers: [<issuer>, …]}); two providers' users with the same name are not the same person"
                )
            }
            let accepted = identity?.providers ?? listedProviders
            if spec.signsAssertionsForUsers, accepted.count > 1 {
                problems.append(
                    "\(label): Parley signs assertions naming the user for this destination, and an assertion carries the user's name only, so it may take the users of one identity provider (identity.providers)"
                )
            }
        } else if identity?.providers != nil {
            problems.append("\(label): identity.providers names identity providers, but the file lists no identityProviders")
        }
        return try spec.checked(label: label, problems: problems, defaulted: defaulted)
    }

    private func checked(label: String, problems found: [String], defaulted: Bool) throws(Invalid) -> Destination {
        var problems = found
        if name.isEmpty || !name.utf8.allSatisfy(isNameByte) {
            problems.append("\(label): name must be letters, digits, '-', '_' or '.'")
        }
        if let displayName, !Self.isDisplayName(displayName) {
            problems.append("\(label): displayName must be 1 to \(Self.maxDisplayNameLength) characters without control characters")
        }
        if let accent = branding?.accent, !Self.isColour(accent) {
            problems.append("\(label): branding.accent must be a colour written #rrggbb")
        }
        if let logo = branding?.logo, !logo.hasPrefix("/") || logo.utf8.count > 4096 || logo.utf8.contains(0) {
            problems.append("\(label): branding.logo must be an absolute file path")
        }
        let baseURL = url.hasSuffix("/") ? String(url.dropLast()) : url
        if let parts = URLParts(baseURL) {
            if parts.query != nil { problems.append("\(label): url must not have a query") }
            // URLParts drops a fragment; libcurl would too, and every proxied path with it.
            if baseURL.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
                problems.append("\(label): url must not have a fragment, spaces or control characters")
            }
            if baseURL.utf8.last == UInt8(ascii: "/") { problems.append("\(label): url must not end with '//'") }
        } else {
            problems.append("\(label): url must be an absolute http(s) URL without user info")
        }
        if let limit = maxRequestBodyBytes, limit < 0 { problems.append("\(label): maxRequestBodyBytes must be >= 0") }
        var certificate: ClientCertificateMaterial?
        if let cert = clientCertificate {
            if let bytes = Base64.decode(cert.pkcs12), !bytes.isEmpty {
                do {
                    certificate = ClientCertificateMaterial(identity: try ClientIdentity.importPKCS12(bytes, password: cert.password))
                } catch {
                    problems.append("\(label): clientCertificate.pkcs12 \(error)")
                }
            } else {
                problems.append("\(label): clientCertificate.pkcs12 is not base64")
            }
        }
        var limits = Timeouts()
        func seconds(_ field: String, _ value: Double?) -> Duration? {
            guard let value else { return nil }
            guard value.isFinite, value > 0, value <= 86_400 else {
                problems.append("\(label): timeouts.\(field) must be a number of seconds in (0, 86400]")
                return nil
            }
            return .milliseconds(Int64((value * 1000).rounded(.up)))
        }
        if let connect = seconds("connectSeconds", timeouts?.connectSeconds) { limits.connect = connect }
        if let idle = seconds("idleSeconds", timeouts?.idleSeconds) { limits.idle = idle }
        if let total = seconds("totalSeconds", timeouts?.totalSeconds) { limits.total = total }
        var settings: OAuth2Settings?
        if let oauth2 {
            do { settings = try OAuth2Settings(spec: oauth2, destination: name, baseURL: baseURL) } catch { problems += error.problems }
        }
        if let appId = smp?.appId, appId.isEmpty || appId.contains("/") || appId.contains("?") {
            problems.append("\(label): smp.appId must be a non-empty name without '/' or '?'")
        }
        if let endpoint = saml2?.finishEndpoint, !endpoint.hasPrefix("/") {
            problems.append("\(label): saml2.finishEndpoint must be a path starting with '/'")
        }
        for (index, pem) in (saml2?.idpCertificates ?? []).enumerated() {
            do { try SigningCertificate.check(pem: pem) } catch { problems.append("\(label): saml2.idpCertificates[\(index)] \(error)") }
        }
        var policy = RegistrationPolicy.open
        switch registration?.policy {
        case nil, "open": break
        case "approval": policy = .approval
        case "enrolment":
            if let hex = registration?.enrolmentSecretSha256?.lowercased(), hex.utf8.count == 64, let digest = Hex.decode(hex) {
                policy = .enrolment(secretSHA256: digest)
            } else {
                problems.append("\(label): registration.enrolmentSecretSha256 must be the SHA-256 of the enrolment secret, in 64 hex digits")
            }
        case let other?:
            problems.append("\(label): registration.policy must be open, enrolment or approval, got '\(other.prefix(40))'")
        }
        switch registration?.identity {
        case nil, "optional", "required": break
        case let other?: problems.append("\(label): registration.identity must be optional or required, got '\(other.prefix(40))'")
        }
        if let claim = identity?.match, claim.isEmpty || claim.utf8.count > 200 {
            problems.append("\(label): identity.match must be a claim name of 1 to 200 bytes")
        }
        // A destination whose sign-ins cannot say who signed in cannot require a known user:
        // its flows could not be held to it.
        if registration?.identity == "required" {
            let why = defaulted
                ? "registration.identity is required (the default where the file lists identityProviders; write registration: {identity: optional} to let unverified users sign in)"
                : "registration.identity is required"
            if saml2 != nil && (saml2?.idpCertificates ?? []).isEmpty {
                problems.append("\(label): \(why), but saml2 sign-ins name nobody without saml2.idpCertificates")
            }
            if let settings, settings.grant == .authorizationCode, !settings.yieldsIdentity {
                problems.append("\(label): \(why), but oauth2 sign-ins name nobody without oauth2.jwksUri or oauth2.userinfoEndpoint")
            }
        }
        // A sign-in vouched for by an issuer that is none of the listed providers (a SAML IdP, the
        // upstream for Basic, an authorization server of its own) can be held to a verified user
        // only when the destination takes the users of one provider: the name alone cannot say whose.
        if let providers = identity?.providers, providers.count > 1 {
            if saml2 != nil || basic?.form == true {
                problems.append(
                    "\(label): identity.providers names \(providers.count) providers, but a saml2 or Basic-form sign-in names a user without saying which provider's; name one")
            }
            if let settings, settings.grant == .authorizationCode, !providers.contains(settings.identityIssuer) {
                problems.append(
                    "\(label): identity.providers names \(providers.count) providers, but oauth2 sign-ins are vouched for by '\(settings.identityIssuer.prefix(200))', none of them; name one")
            }
        }
        if registration?.implicit == true {
            // An agent's registration exists the moment its token is shown: nobody could approve it or bring a secret first.
            if policy != .open {
                problems.append("\(label): registration.implicit registrations are created on first use, so registration.policy must be open")
            }
            if smp != nil {
                problems.append("\(label): registration.implicit registrations are created on first use, with no SMP registration upstream, so smp cannot be set")
            }
        }
        for scope in registration?.scopes ?? [] where scope.isEmpty || scope.utf8.count > 200 || !scope.utf8.allSatisfy(isScopeByte) {
            problems.append("\(label): registration.scopes must be OAuth scope tokens of 1 to 200 bytes (printable ASCII without spaces, '\"' or '\\')")
        }
        if registration?.scopes != nil, registration?.implicit != true {
            problems.append("\(label): registration.scopes is what an agent's access token must carry, so it needs registration.implicit: true")
        }
        for (index, rule) in (stepUp ?? []).enumerated() {
            let at = "\(label): stepUp[\(index)]"
            if !rule.pathPrefix.hasPrefix("/") || rule.pathPrefix.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
                problems.append("\(at).pathPrefix must be a path starting with '/', without spaces or control characters")
            }
            if !rule.maxAgeSeconds.isFinite || rule.maxAgeSeconds < 0 || rule.maxAgeSeconds > 31_536_000 {
                problems.append("\(at).maxAgeSeconds must be a number of seconds from 0 to 31536000")
            }
            for method in rule.methods ?? [] where method.isEmpty || !method.utf8.allSatisfy({ isNameByte($0) && $0 != UInt8(ascii: ".") }) {
                problems.append("\(at).methods must be HTTP method names, got '\(method.prefix(40))'")
            }
        }
        // A step-up asks a person to sign in again: the destination needs a sign-in a person can do.
        if stepUp?.isEmpty == false {
            if !(settings?.grant == .authorizationCode || saml2 != nil || basic?.form == true) {
                problems.append("\(label): stepUp needs a sign-in a person does (oauth2 authorization_code, saml2, or basic with form: true)")
            }
        }
        // A propagation grant speaks for the registration's verified user: without one it has nobody to speak for.
        if let settings, settings.propagation != nil, registration?.identity != "required" {
            problems.append("\(label): oauth2.grant \(settings.grant.rawValue) speaks for a verified user, so it needs registration: {identity: required}")
        }
        var webhookSubscriptions: [WebhookSubscription] = []
        for (index, spec) in (webhooks ?? []).enumerated() {
            let (subscription, found) = spec.validated(at: "\(label): webhooks[\(index)]", scope: name)
            problems += found
            if let subscription { webhookSubscriptions.append(subscription) }
        }
        guard problems.isEmpty else { throw Invalid(problems: problems) }
        return Destination(
            spec: self, baseURL: baseURL, certificate: certificate, timeouts: limits, oauth2: settings, policy: policy, webhooks: webhookSubscriptions)
    }
}

/// RFC 6749 §3.3: `scope-token = 1*( %x21 / %x23-5B / %x5D-7E )`.
private func isScopeByte(_ b: UInt8) -> Bool {
    b == 0x21 || (0x23...0x5B).contains(b) || (0x5D...0x7E).contains(b)
}

private func isNameByte(_ b: UInt8) -> Bool {
    switch b {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
        UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
        true
    default: false
    }
}
