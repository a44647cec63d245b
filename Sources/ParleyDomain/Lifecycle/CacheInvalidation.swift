package import Foundation
package import Logging
import ServiceLifecycle

/// Keeps this instance's caches current: a registration changed here is dropped at once
/// and announced; a change announced by any instance drops it here. While the cache
/// signal is lost, nothing is cached (client-token lookups, cookie jars and OAuth2 tokens
/// are read from the database, managers are rebuilt), so no instance acts on a view it cannot hear about.
package struct CacheInvalidation: Service {
    /// The caches below the conversations, and the announcing.
    package let news: RegistrationNews
    package let conversations: Conversations

    /// Long-polls of a registration's status (`GET /v1/registrations/me?wait=`), woken by every
    /// change announced for it, on any instance.
    package var changes: KeyedWaiters<UUID> { news.changes }

    /// A registration's credentials or state changed: forget it here (its managers too), then
    /// tell every instance.
    package func changed(_ registrationID: UUID) async {
        conversations.forget(registrationID)
        await news.changed(registrationID)
    }

    package func run() async throws {
        let events = news.signals.events()
        // Graceful shutdown ends the wait for events; that is a normal end.
        await cancelWhenGracefulShutdown {
            for await event in events { apply(event) }
        }
        // Stopping: waiting long-polls answer with what they have, as flow long-polls do.
        changes.close()
    }

    package func apply(_ event: CacheEvent) {
        switch event {
        case .registration(let id):
            conversations.forget(id)
            news.forget(id)
        case .token(let key):
            news.tokens.forget(key: key, registrationID: nil)
        case .cookieJar(let id):
            conversations.cookies.forget(registrationID: id.uuidString.lowercased())
        case .notBefore:
            news.notBefores.forget()
        case .all:
            news.notBefores.setCaching(true)
            news.clientTokens.setCaching(false)
            conversations.cookies.setCaching(false)
            news.tokens.setCaching(false)
            conversations.forgetAll()
            news.clientTokens.setCaching(true)
            conversations.cookies.setCaching(true)
            news.tokens.setCaching(true)
            changes.wake { _ in true }
        case .suspended:
            news.logger.warning("cache signal lost: caching paused until it is back")
            news.notBefores.setCaching(false)
            news.clientTokens.setCaching(false)
            conversations.cookies.setCaching(false)
            news.tokens.setCaching(false)
            conversations.forgetAll()
            changes.wake { _ in true }
        }
    }

    package init(news: RegistrationNews, conversations: Conversations) {
        self.news = news
        self.conversations = conversations
    }
}

/// A registration changed: what every room that changes one needs, below the conversations (so
/// the token broker's `Reconnects` can have it before the conversations exist). It forgets the
/// registration's client token, its OAuth2 tokens and wakes its long-polls here, then announces
/// the change; every instance's `CacheInvalidation` (this one's too, by its echo) drops the rest.
package struct RegistrationNews: Sendable {
    package let signals: any CacheSignals
    package let clientTokens: ClientTokens
    package let tokens: any TokenRepository
    /// The revocations' not-befores this instance keeps.
    package let notBefores: NotBefores
    package let logger: Logger
    package let changes = KeyedWaiters<UUID>()

    /// Forgets the registration here and tells every instance.
    package func changed(_ registrationID: UUID) async {
        forget(registrationID)
        do {
            try await signals.announce(registrationID: registrationID)
        } catch {
            logger.warning(
                "cache invalidation not announced; other instances keep their copy until their signal resets",
                metadata: ["registration.id": .string(registrationID.uuidString.lowercased()), "error": "\(error)"])
        }
    }

    /// This instance's caches below the conversations forget the registration; its long-polls wake.
    package func forget(_ registrationID: UUID) {
        clientTokens.forget(registrationID)
        tokens.forget(key: nil, registrationID: registrationID)
        changes.wake { $0 == registrationID }
    }

    package init(signals: any CacheSignals, clientTokens: ClientTokens, tokens: any TokenRepository, notBefores: NotBefores, logger: Logger) {
        self.signals = signals
        self.clientTokens = clientTokens
        self.tokens = tokens
        self.notBefores = notBefores
        self.logger = logger
    }
}
