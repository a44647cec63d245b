import Conversation
import ParleyCrypto

/// A named upstream and how to authenticate to it (the seed's configurator input).
/// Blocks that are absent are off; present (even `{}`) they are on with the seeds' defaults.
public struct Destination: Sendable, Decodable, Equatable {
    public var name: String
    public var url: String
    public var allowedReturnUrls: [String]?
    public var smp: SMP?
    public var csrf: Bool?
    public var basic: Basic?
    public var maxRequestBodyBytes: Int64?
    public var clientCertificate: ClientCertificate?
    /// Extra trust anchors (PEM) for this upstream. Parley's addition: private CAs are common in SMP landscapes.
    public var caCertificate: String?
    public var timeouts: TimeoutSettings?
    public var saml2: SAML2?
    public var otp: OTP?
    public var oauth2: OAuth2?

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
    }

    public struct OTP: Sendable, Decodable, Equatable {
        public var responseHeaderName: String?
        public var responseHeaderValue: String?
        public var additionalParams: [String: String]?
        public var finishParams: [String: String]?
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

        public struct Challenge: Sendable, Decodable, Equatable {
            public var statuses: [Int]?
            public var sapStatusHeader: Bool?
        }

        public init(
            grant: String?, authorizationEndpoint: String?, tokenEndpoint: String?, revocationEndpoint: String?, clientId: String?,
            clientSecret: String?, clientAuthentication: String?, scopes: [String]?, scopeKeys: [ScopeKeyRule]?, challenge: Challenge?
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

    public static let defaultMaxRequestBodyBytes: Int64 = 1 << 30

    public var requestBodyLimit: Int64 { maxRequestBodyBytes ?? Self.defaultMaxRequestBodyBytes }
    public var csrfEnabled: Bool { csrf ?? false }

    /// The destination URL without a trailing slash.
    public var baseURL: String { url.hasSuffix("/") ? String(url.dropLast()) : url }

    /// Whether `returnUrl` is allowed: equal to an entry, or starting with an entry ending in `*`.
    public func allowsReturnURL(_ returnUrl: String) -> Bool {
        for entry in allowedReturnUrls ?? [] {
            if entry.hasSuffix("*") {
                if returnUrl.hasPrefix(entry.dropLast()) { return true }
            } else if entry == returnUrl {
                return true
            }
        }
        return false
    }

    /// Every problem with this destination, for start-up to report at once.
    public func problems() -> [String] {
        var out: [String] = []
        if name.isEmpty || !name.utf8.allSatisfy({ isNameByte($0) }) {
            out.append("destination '\(name)': name must be letters, digits, '-', '_' or '.'")
        }
        if let parts = URLParts(url) {
            if parts.query != nil { out.append("destination '\(name)': url must not have a query") }
        } else {
            out.append("destination '\(name)': url must be an absolute http(s) URL without user info")
        }
        if let limit = maxRequestBodyBytes, limit < 0 { out.append("destination '\(name)': maxRequestBodyBytes must be >= 0") }
        if let cert = clientCertificate, Base64.decode(cert.pkcs12) == nil {
            out.append("destination '\(name)': clientCertificate.pkcs12 is not base64")
        }
        if oauth2 != nil {
            do { _ = try OAuth2Settings(destination: self) } catch let e as OAuth2Settings.Invalid { out += e.problems } catch {}
        }
        if let appId = smp?.appId, appId.isEmpty || appId.contains("/") || appId.contains("?") {
            out.append("destination '\(name)': smp.appId must be a non-empty name without '/' or '?'")
        }
        return out
    }
}

private func isNameByte(_ b: UInt8) -> Bool {
    switch b {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
        UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
        true
    default: false
    }
}
