import AuthFlows
import Conversation
import Foundation

/// The per-registration conversation managers of this instance: built lazily from the
/// destination's settings and the registration's secrets, evicted when idle or told.
struct Conversations: Sendable {
    let destinations: [String: Destination]
    let configurator: DestinationConfigurator
    let managers: ManagerCache<UUID>
    /// Managers for a flow's browser on the hosted upstream (`/web/{destination}/…`), by flow.
    let browserManagers: ManagerCache<UUID>
    let secrets: Secrets
    let cookies: any CookieRepository
    let csrfTokens: CSRFTokenCache
    /// Where a destination's upstream is seen by a browser (`PUBLIC_URL/web/{destination}`).
    let hostedBase: @Sendable (String) -> String
    /// Where a flow's browser keeps what the upstream sets until the flow completes.
    let staging: CookieStaging
    /// What watches a registration's API conversations (`ConversationAccounting`).
    let accounting: @Sendable (RegistrationRecord, Destination) -> [any ConversationObserver]

    /// The registration's destination, or `400` when the configuration no longer has it.
    func destination(of registration: RegistrationRecord) throws(Problem) -> Destination {
        guard let destination = destinations[registration.destination] else {
            throw Problem.invalid("the registration's destination is no longer configured")
        }
        return destination
    }

    /// The registration's conversation manager, built on first use.
    func manager(for registration: RegistrationRecord) throws -> ConversationManager {
        let destination = try destination(of: registration)
        return try managers.manager(for: registration.id) {
            configurator.makeManager(
                for: destination, registration: try secrets.material(of: registration), observers: accounting(registration, destination))
        }
    }

    /// The manager a flow's browser on the hosted upstream uses: the registration's session
    /// (APPCID, certificates) and Basic credentials, nothing that asks for a person; its
    /// cookie jar is the registration's overlaid with the flow's staged cookies, and what the
    /// upstream sets is staged with the flow (`CookieStaging`), seen through the forwarded
    /// address space.
    func browserManager(for registration: RegistrationRecord, flow: FlowRecord) throws -> ConversationManager {
        let destination = try destination(of: registration)
        return try browserManagers.manager(for: flow.id) {
            configurator.makeManager(
                for: destination, registration: try secrets.material(of: registration), audience: .browser(addressSpace(of: destination)),
                cookieJar: StagedCookieJar(staging: staging, flowID: flow.id, registrationID: registration.idString))
        }
    }

    /// The browser's and the upstream's address spaces of a destination's hosted upstream.
    func addressSpace(of destination: Destination) -> ForwardedAddressSpace? {
        ForwardedAddressSpace(publicBase: hostedBase(destination.name), upstreamBase: destination.baseURL)
    }

    /// The managers must be rebuilt (a new APPCID, new credentials).
    func evict(_ registrationID: UUID) {
        managers.evict(registrationID)
        // Browser managers are kept by flow, few and short-lived: all of them are rebuilt.
        browserManagers.evictAll()
    }

    /// Everything this instance remembers of a registration that is gone.
    func forget(_ registrationID: UUID) {
        let id = registrationID.uuidString.lowercased()
        cookies.forget(registrationID: id)
        evict(registrationID)
        csrfTokens.forget(registrationID: id)
    }

    /// Everything this instance remembers of every registration.
    func forgetAll() {
        managers.evictAll()
        browserManagers.evictAll()
        csrfTokens.forgetAll()
    }

    func tokenEndpoint(for destination: Destination) -> TokenEndpointClient? {
        configurator.tokenEndpoint(for: destination)
    }
}

/// Counts restarts; watches only.
struct MetricsObserver: ConversationObserver {
    let metrics: Metrics
    func observe(_ event: ConversationEvent, conversation: Conversation) {
        if case .restarting(let reason) = event { metrics.increment(.conversationRestarts, [("reason", reason.label)]) }
    }
}
