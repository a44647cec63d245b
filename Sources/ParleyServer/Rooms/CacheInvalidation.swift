import Foundation
import Logging
import ServiceLifecycle

/// Keeps this instance's caches current: a registration changed here is dropped at once
/// and announced; a change announced by any instance drops it here. While the cache
/// signal is lost, nothing is cached (client-token lookups, cookie jars and OAuth2 tokens
/// are read from the database, managers are rebuilt), so no instance acts on a view it cannot hear about.
struct CacheInvalidation: Service {
    let signals: any CacheSignals
    let clientTokens: ClientTokens
    let conversations: Conversations
    let tokens: any TokenRepository
    /// The revocations' not-befores this instance keeps.
    let notBefores: NotBefores
    let logger: Logger
    /// Long-polls of a registration's status (`GET /v1/registrations/me?wait=`), woken by every
    /// change announced for it, on any instance.
    let changes = KeyedWaiters<UUID>()

    /// A registration's credentials or state changed: forget it here, then tell every instance.
    func changed(_ registrationID: UUID) async {
        apply(.registration(registrationID))
        do {
            try await signals.announce(registrationID: registrationID)
        } catch {
            logger.warning(
                "cache invalidation not announced; other instances keep their copy until their signal resets",
                metadata: ["registration.id": .string(registrationID.uuidString.lowercased()), "error": "\(error)"])
        }
    }

    func run() async throws {
        let events = signals.events()
        // Graceful shutdown ends the wait for events; that is a normal end.
        await cancelWhenGracefulShutdown {
            for await event in events { apply(event) }
        }
        // Stopping: waiting long-polls answer with what they have, as flow long-polls do.
        changes.close()
    }

    func apply(_ event: CacheEvent) {
        switch event {
        case .registration(let id):
            clientTokens.forget(id)
            conversations.forget(id)
            tokens.forget(key: nil, registrationID: id)
            changes.wake { $0 == id }
        case .token(let key):
            tokens.forget(key: key, registrationID: nil)
        case .cookieJar(let id):
            conversations.cookies.forget(registrationID: id.uuidString.lowercased())
        case .notBefore:
            notBefores.forget()
        case .all:
            notBefores.setCaching(true)
            clientTokens.setCaching(false)
            conversations.cookies.setCaching(false)
            tokens.setCaching(false)
            conversations.forgetAll()
            clientTokens.setCaching(true)
            conversations.cookies.setCaching(true)
            tokens.setCaching(true)
            changes.wake { _ in true }
        case .suspended:
            logger.warning("cache signal lost: caching paused until it is back")
            notBefores.setCaching(false)
            clientTokens.setCaching(false)
            conversations.cookies.setCaching(false)
            tokens.setCaching(false)
            conversations.forgetAll()
            changes.wake { _ in true }
        }
    }
}
