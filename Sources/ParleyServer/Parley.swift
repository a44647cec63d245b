import AuthFlows
public import Conversation
import Foundation
public import Logging
import ParleyCrypto
public import Store

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
    let audit: AuditLog
    let configurator: DestinationConfigurator
    let managers: ManagerCache<UUID>
    let csrfTokens = CSRFTokenCache()

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
        self.cookies = CookieRepository(store: store, keyRing: configuration.keyRing)
        self.audit = AuditLog(store: store, logger: logger)
        self.configurator = DestinationConfigurator(
            transport: transport, cookieRecords: cookies, csrfTokens: csrfTokens, clock: clock,
            observers: [MetricsObserver(metrics: metrics)], logger: logger)
        self.managers = ManagerCache(idleTimeout: configuration.managerIdleTimeout, clock: clock)
    }

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
    func authenticate(authorization: String?) async throws -> RegistrationRecord {
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            throw Problem.invalidClientToken
        }
        let token = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, token.utf8.count <= 512, let registration = try await registrations.find(clientToken: token) else {
            throw Problem.invalidClientToken
        }
        return registration
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
