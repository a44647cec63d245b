public import Conversation
public import ParleyCrypto
public import Logging
import Synchronization

/// What a registration brings to its manager: its id, APPCID, and secrets opened from the store.
public struct RegistrationMaterial: Sendable {
    public var registrationID: String
    public var appcid: String?
    public var credentials: UserCredentials?
    public var clientCertificate: ClientCertificateMaterial?
    /// The verified user's identity token, kept for a destination's propagation grant.
    public var identity: PropagatedIdentity?

    public init(
        registrationID: String, appcid: String? = nil, credentials: UserCredentials? = nil,
        clientCertificate: ClientCertificateMaterial? = nil, identity: PropagatedIdentity? = nil
    ) {
        self.registrationID = registrationID
        self.appcid = appcid
        self.credentials = credentials
        self.clientCertificate = clientCertificate
        self.identity = identity
    }
}

/// A registration as its manager's filters see it (`conversation.party`): its id, and the
/// secrets its grants and challenges use. One per registration's manager; the filters are its
/// destination's.
public final class RegistrationParty: ConversationParty {
    public let id: String
    public let credentials: UserCredentials?
    /// The verified user a propagation grant speaks for.
    public var identity: PropagatedIdentity? { verified?.identity }
    /// Boxed: most registrations have none, and an identity is wider than the rest of this object.
    private let verified: Verified?

    private final class Verified: Sendable {
        let identity: PropagatedIdentity
        init(_ identity: PropagatedIdentity) { self.identity = identity }
    }

    public init(_ material: RegistrationMaterial) {
        id = material.registrationID
        credentials = material.credentials
        verified = material.identity.map(Verified.init)
    }
}

/// A client certificate as Parley keeps it: checked and converted to PEM once (no key
/// derivation per connection); rows stored before that keep their PKCS#12 as uploaded.
public struct ClientCertificateMaterial: Sendable, Equatable, Codable {
    public var identity: ClientIdentity?
    public var pkcs12: [UInt8]?
    public var password: String?

    public init(identity: ClientIdentity) {
        self.identity = identity
    }

    public init(pkcs12: [UInt8], password: String?) {
        self.pkcs12 = pkcs12
        self.password = password
    }

    func apply(to tls: inout TLSOptions) {
        if let identity {
            tls.clientCertificatePEM = identity.certificatePEM
            tls.clientKeyPEM = identity.privateKeyPEM
        } else {
            tls.clientPKCS12 = pkcs12
            tls.clientPKCS12Password = password
        }
    }
}

/// Builds a registration's conversation manager from its destination (the seed's
/// CommonAuthenticationConfigurator). Filters are composed once per destination (`template`)
/// and shared by its registrations' managers.
public struct DestinationConfigurator: Sendable {
    public let transport: any Transport
    public var cookieRecords: any CookieRecords { cookies.records }
    /// The cookie records and clock every registration's jar shares.
    private let cookies: RegistrationCookieJar.Source
    public let csrfTokens: CSRFTokenCache
    public let clock: any WallClock
    public let observers: [any ConversationObserver]
    public let oauth2: OAuth2Broker?
    public let logger: Logger
    /// What every manager of one destination shares: its token-endpoint client and its logger.
    private let shared = PerDestination()

    /// Built once per destination (by name) and kept, so that a registration's manager holds references.
    private final class PerDestination: Sendable {
        let endpoints = Mutex<[String: TokenEndpointClient]>([:])
        let loggers = Mutex<[String: Logger]>([:])
    }

    public init(
        transport: any Transport, cookieRecords: any CookieRecords, csrfTokens: CSRFTokenCache, clock: any WallClock,
        observers: [any ConversationObserver] = [], oauth2: OAuth2Broker? = nil, logger: Logger
    ) {
        self.transport = transport
        self.cookies = RegistrationCookieJar.Source(records: cookieRecords, clock: clock)
        self.csrfTokens = csrfTokens
        self.clock = clock
        self.observers = observers
        self.oauth2 = oauth2
        self.logger = logger
    }

    /// The token-endpoint client for a destination with an OAuth2 block.
    public func tokenEndpoint(for destination: Destination) -> TokenEndpointClient? {
        guard let settings = destination.oauth2 else { return nil }
        if let known = shared.endpoints.withLock({ $0[destination.name] }), known.settings == settings { return known }
        let endpoint = TokenEndpointClient(
            settings: settings, transport: transport, tls: tlsOptions(for: destination, registration: RegistrationMaterial(registrationID: "")),
            clock: clock)
        shared.endpoints.withLock { $0[destination.name] = endpoint }
        return endpoint
    }

    /// Who the manager talks for. A browser on Parley's hosted upstream answers SAML2
    /// and OTP itself and posts its own forms: its manager keeps the session (cookies,
    /// APPCID, certificates) and the Basic credentials, nothing that asks for a person.
    /// The browser's manager sees the upstream through the hosted upstream's forwarded address
    /// space: what the upstream sets in the browser's space is stored in its own.
    public enum Audience: Sendable, Equatable {
        case api
        case browser(ForwardedAddressSpace?)
    }

    /// `observers` watch this manager's conversations besides the configurator's own;
    /// `cookieJar` replaces the registration's jar (a flow's browser stages what it is set).
    public func makeManager(
        for destination: Destination, registration: RegistrationMaterial, audience: Audience = .api,
        observers extra: [any ConversationObserver] = [], cookieJar: (any CookieStorage)? = nil
    ) -> ConversationManager {
        makeManager(
            from: template(for: destination, audience: audience, holdingCredentials: registration.credentials != nil, observers: extra),
            for: destination, registration: registration, audience: audience, cookieJar: cookieJar)
    }

    /// A registration's manager made from its destination's `template`: what it has of its own
    /// is its session (its jar, APPCID, certificate) and its party; the filters, observers and
    /// transport are the template's, shared.
    public func makeManager(
        from template: ConversationManager, for destination: Destination, registration: RegistrationMaterial, audience: Audience = .api,
        cookieJar: (any CookieStorage)? = nil
    ) -> ConversationManager {
        var headers = HeaderFields()
        if let appcid = registration.appcid { headers.set("X-SMP-APPCID", appcid) }
        var jar: any CookieStorage =
            cookieJar ?? RegistrationCookieJar(registrationID: registration.registrationID, source: cookies)
        if case .browser(let space?) = audience { jar = ForwardedCookieJar(jar: jar, space: space) }
        // The template's TLS options are the destination's: only a certificate of the
        // registration's own makes others (and a copy of the destination's CA with them).
        let tls = registration.clientCertificate == nil ? template.session.tls : tlsOptions(for: destination, registration: registration)
        let session = SessionConfiguration(cookieJar: jar, headers: headers, tls: tls, timeouts: destination.timeouts)
        return template.serving(RegistrationParty(registration), session: session)
    }

    /// What the managers of `destination` share, for one audience and for registrations that
    /// hold credentials or not: the filter chains, the observers (`extra` besides the
    /// configurator's own), the transport and the logger. Who keeps many managers makes it once
    /// per destination and kind, and each registration's manager from it (`makeManager(from:…)`).
    public func template(
        for destination: Destination, audience: Audience = .api, holdingCredentials: Bool, observers extra: [any ConversationObserver] = []
    ) -> ConversationManager {
        let observers = extra.isEmpty ? self.observers : self.observers.isEmpty ? extra : self.observers + extra
        var requestFilters: [any RequestFilter] = []
        var challengeFilters: [any ChallengeFilter] = []
        var responseFilters: [any ResponseFilter] = []
        if destination.basic != nil, holdingCredentials { challengeFilters.append(BasicChallengeFilter()) }
        let logger = shared.loggers.withLock { loggers in
            if let known = loggers[destination.name] { return known }
            var logger = self.logger
            logger[metadataKey: "destination"] = .string(destination.name)
            loggers[destination.name] = logger
            return logger
        }
        // The destination's TLS options and timeouts: a registration's manager without its own
        // certificate shares them with the template (`ConversationManager.serving`).
        let session = SessionConfiguration(
            tls: tlsOptions(for: destination, registration: RegistrationMaterial(registrationID: "")), timeouts: destination.timeouts)
        guard audience == .api else {
            return ConversationManager(
                transport: transport, session: session, challengeFilters: challengeFilters, observers: observers, logger: logger,
                propagateTraceContext: destination.propagateTraceContext)
        }
        if destination.basic?.form == true { challengeFilters.append(BasicFormChallengeFilter()) }
        // CSRF before OAuth2: the CSRF fetch runs on a copy without the filters already
        // run, so it still passes the OAuth2 filter and carries a bearer token.
        if destination.csrfEnabled {
            let csrf = CSRFFilter(cache: csrfTokens)
            requestFilters.append(csrf)
            responseFilters.append(csrf)
        }
        if let broker = oauth2, let endpoint = tokenEndpoint(for: destination) {
            let participant = OAuth2Participant(broker: broker, endpoint: endpoint)
            requestFilters.append(OAuth2RequestFilter(participant))
            responseFilters.append(OAuth2ResponseFilter(participant))
        }
        if let saml2 = destination.saml2 { responseFilters.append(SAML2ChallengeFilter(settings: saml2)) }
        if let otp = destination.otp { responseFilters.append(OTPChallengeFilter(settings: otp)) }
        return ConversationManager(
            transport: transport, session: session, requestFilters: requestFilters, challengeFilters: challengeFilters,
            responseFilters: responseFilters, observers: observers, logger: logger, propagateTraceContext: destination.propagateTraceContext)
    }

    /// The registration's certificate wins over the destination's. libcurl presents it
    /// only when the server asks, which is the TLS form of the seed's challenge.
    func tlsOptions(for destination: Destination, registration: RegistrationMaterial) -> TLSOptions {
        var tls = TLSOptions()
        if let pem = destination.caCertificate { tls.caPEM = Array(pem.utf8) }
        if let own = registration.clientCertificate {
            own.apply(to: &tls)
        } else if let shared = destination.clientCertificate {
            shared.apply(to: &tls)
        }
        return tls
    }
}
