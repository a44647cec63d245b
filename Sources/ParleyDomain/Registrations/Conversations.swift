package import AuthFlows
package import Conversation
package import Foundation
import Synchronization

/// The per-registration conversation managers of this instance: built lazily from the
/// destination's settings and the registration's secrets, evicted when idle or told.
package struct Conversations: Sendable {
    package let destinations: [String: Destination]
    package let configurator: DestinationConfigurator
    package let managers: ManagerCache<UUID>
    /// Managers for a flow's browser on the hosted upstream (`/web/{destination}/…`), by flow.
    package let browserManagers: ManagerCache<UUID>
    package let secrets: Secrets
    package let cookies: any CookieRepository
    package let csrfTokens: CSRFTokenCache
    /// Where a destination's upstream is seen by a browser (`PUBLIC_URL/web/{destination}`).
    package let hostedBase: @Sendable (String) -> String
    /// Where a flow's browser keeps what the upstream sets until the flow completes.
    package let staging: CookieStaging
    /// What watches the API conversations of a destination's registrations that hold
    /// credentials or not (`ConversationAccounting`).
    package let accounting: @Sendable (Destination, Bool) -> [any ConversationObserver]
    /// What the API managers of a destination's registrations share (`DestinationConfigurator.template`):
    /// made once per destination and kind, so that a registration's manager is its session and party.
    private let templates = Templates()

    private final class Templates: Sendable {
        struct Key: Hashable {
            let destination: String
            let holdingCredentials: Bool
        }

        let made = Mutex<[Key: ConversationManager]>([:])
    }

    /// The registration's destination, or `400` when the configuration no longer has it.
    package func destination(of registration: RegistrationRecord) throws(RegistrationError) -> Destination {
        guard let destination = destinations[registration.destination] else {
            throw .destinationGone
        }
        return destination
    }

    /// The registration's conversation manager, built on first use.
    package func manager(for registration: RegistrationRecord) throws -> ConversationManager {
        let destination = try destination(of: registration)
        return try managers.manager(for: registration.id) {
            let material = try secrets.material(of: registration)
            return configurator.makeManager(
                from: template(for: destination, holdingCredentials: material.credentials != nil), for: destination, registration: material)
        }
    }

    /// The template of `destination`'s API managers, made on first use.
    private func template(for destination: Destination, holdingCredentials: Bool) -> ConversationManager {
        let key = Templates.Key(destination: destination.name, holdingCredentials: holdingCredentials)
        if let made = templates.made.withLock({ $0[key] }) { return made }
        let template = configurator.template(
            for: destination, holdingCredentials: holdingCredentials, observers: accounting(destination, holdingCredentials))
        return templates.made.withLock { made in
            if let raced = made[key] { return raced }
            made[key] = template
            return template
        }
    }

    /// The manager a flow's browser on the hosted upstream uses: the registration's session
    /// (APPCID, certificates) and Basic credentials, nothing that asks for a person; its
    /// cookie jar is the registration's overlaid with the flow's staged cookies, and what the
    /// upstream sets is staged with the flow (`CookieStaging`), seen through the forwarded
    /// address space.
    package func browserManager(for registration: RegistrationRecord, flow: FlowRecord) throws -> ConversationManager {
        let destination = try destination(of: registration)
        return try browserManagers.manager(for: flow.id) {
            configurator.makeManager(
                for: destination, registration: try secrets.material(of: registration), audience: .browser(addressSpace(of: destination)),
                cookieJar: StagedCookieJar(staging: staging, flowID: flow.id, registrationID: registration.idString))
        }
    }

    /// The browser's and the upstream's address spaces of a destination's hosted upstream.
    package func addressSpace(of destination: Destination) -> ForwardedAddressSpace? {
        ForwardedAddressSpace(publicBase: hostedBase(destination.name), upstreamBase: destination.baseURL)
    }

    /// The managers must be rebuilt (a new APPCID, new credentials).
    package func evict(_ registrationID: UUID) {
        managers.evict(registrationID)
        // Browser managers are kept by flow, few and short-lived: all of them are rebuilt.
        browserManagers.evictAll()
    }

    /// Everything this instance remembers of a registration that is gone.
    package func forget(_ registrationID: UUID) {
        let id = registrationID.uuidString.lowercased()
        cookies.forget(registrationID: id)
        evict(registrationID)
        csrfTokens.forget(registrationID: id)
    }

    /// Everything this instance remembers of every registration.
    package func forgetAll() {
        managers.evictAll()
        browserManagers.evictAll()
        csrfTokens.forgetAll()
    }

    package func tokenEndpoint(for destination: Destination) -> TokenEndpointClient? {
        configurator.tokenEndpoint(for: destination)
    }

    package init(destinations: [String: Destination], configurator: DestinationConfigurator, managers: ManagerCache<UUID>, browserManagers: ManagerCache<UUID>, secrets: Secrets, cookies: any CookieRepository, csrfTokens: CSRFTokenCache, hostedBase: @escaping @Sendable (String) -> String, staging: CookieStaging, accounting: @escaping @Sendable (Destination, Bool) -> [any ConversationObserver]) {
        self.destinations = destinations
        self.configurator = configurator
        self.managers = managers
        self.browserManagers = browserManagers
        self.secrets = secrets
        self.cookies = cookies
        self.csrfTokens = csrfTokens
        self.hostedBase = hostedBase
        self.staging = staging
        self.accounting = accounting
    }
}

/// Counts restarts; watches only.
package struct MetricsObserver: ConversationObserver {
    package let metrics: Metrics
    package func observe(_ event: ConversationEvent, conversation: Conversation) {
        if case .restarting(let reason) = event { metrics.increment(.conversationRestarts, [("reason", reason.label)]) }
    }

    package init(metrics: Metrics) {
        self.metrics = metrics
    }
}
