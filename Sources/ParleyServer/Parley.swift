import AuthFlows
public import Conversation
import Foundation
public import Logging
import ParleyCrypto
public import Store
public import ServiceLifecycle

/// Everything a Parley instance holds, built once at start. Handlers borrow it;
/// nothing in it is per request except what conversation managers keep lazily.
public final class Parley: Sendable {
    public let configuration: ParleyConfiguration
    public let store: PostgresStore
    public let transport: any Transport
    public let clock: any WallClock
    public let metrics: Metrics
    public let logger: Logger
    let registrations: RegistrationRepository
    let cookies: CookieRepository
    let tokens: TokenRepository
    let flows: FlowRepository
    let audit: AuditLog
    let oauth2: OAuth2Broker
    let configurator: DestinationConfigurator
    let managers: ManagerCache<UUID>
    let csrfTokens = CSRFTokenCache()
    /// Client-token hash → registration, for the proxy path only (see `ShortCache`).
    let proxyRegistrations = ShortCache<[UInt8], RegistrationRecord>(lifetime: .milliseconds(500))
    let listener: NotificationListener
    let flowNotifications: FlowNotifications

    public init(
        configuration: ParleyConfiguration, store: PostgresStore, transport: any Transport, clock: any WallClock = SystemClock(),
        metrics: Metrics = Metrics(), logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.transport = transport
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        self.registrations = RegistrationRepository(store: store, keyRing: configuration.keyRing)
        self.cookies = CookieRepository(store: store, keyRing: configuration.keyRing, cache: ShortCache(lifetime: .milliseconds(500)))
        self.tokens = TokenRepository(store: store, keyRing: configuration.keyRing)
        self.flows = FlowRepository(store: store)
        let audit = AuditLog(store: store, logger: logger)
        self.audit = audit
        self.oauth2 = OAuth2Broker(store: tokens, clock: clock, events: AuditTokenEvents(audit: audit), logger: logger)
        self.configurator = DestinationConfigurator(
            transport: transport, cookieRecords: cookies, csrfTokens: csrfTokens, clock: clock,
            observers: [MetricsObserver(metrics: metrics)], oauth2: oauth2, logger: logger)
        self.managers = ManagerCache(idleTimeout: configuration.managerIdleTimeout, clock: clock)
        self.listener = NotificationListener(configuration: StoreConfiguration(connectionString: configuration.databaseURL), logger: logger)
        self.flowNotifications = FlowNotifications(listener: listener)
    }

    /// The long-lived parts, in start order: the store, the LISTEN connection, the flow waiters.
    public var services: [any Service] { [store, listener, flowNotifications] }

    /// The registration's conversation manager, built on first use.
    func manager(for registration: RegistrationRecord) throws -> ConversationManager {
        guard let destination = configuration.destinations[registration.destination] else {
            throw Problem(.badRequest, .invalidRequest, "the registration's destination is no longer configured")
        }
        return try managers.manager(for: registration.id) {
            configurator.makeManager(for: destination, registration: try registrations.material(of: registration))
        }
    }

    /// The registration a bearer client token names, or `401 invalid_client_token`.
    /// `cached`: the proxy path may use a lookup at most 500 ms old.
    func authenticate(authorization: String?, cached: Bool = false) async throws -> RegistrationRecord {
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            throw Problem.invalidClientToken
        }
        let token = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, token.utf8.count <= 512 else { throw Problem.invalidClientToken }
        let hash = SecretToken.hash(token)
        if cached, let registration = proxyRegistrations.value(for: hash) { return registration }
        guard let registration = try await registrations.find(clientTokenHash: hash) else { throw Problem.invalidClientToken }
        if cached { proxyRegistrations.set(registration, for: hash) }
        return registration
    }
}

/// Token events become audit events (no token values).
struct AuditTokenEvents: TokenEventSink {
    let audit: AuditLog
    func record(_ event: TokenEvent, key: TokenKey, grant: OAuth2Settings.Grant) async {
        await audit.record(
            event.rawValue, actor: .system, registrationID: key.registrationID.flatMap(UUID.init(uuidString:)), destination: key.destination,
            detail: ["grant": grant.rawValue, "scopeKey": key.scopeKey])
    }
}

/// Counts restarts and final upstream answers; watches only.
struct MetricsObserver: ConversationObserver {
    let metrics: Metrics
    func observe(_ event: ConversationEvent, conversation: Conversation) {
        switch event {
        case .restarting: metrics.increment("parley_conversation_restarts_total")
        default: break
        }
    }
}
