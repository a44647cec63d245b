package import AuthFlows
public import Foundation
public import Store

/// Cache invalidation between instances through `LISTEN/NOTIFY`: a change is announced
/// on one channel with the registration's id; every instance (this one included) hears
/// it. A lost LISTEN connection suspends every cache until it is back, then everything
/// is dropped, since notifications may have been missed meanwhile.
public struct PostgresCacheSignals: CacheSignals {
    package static let channel = "parley_cache"

    package let store: PostgresStore
    package let listener: NotificationListener

    public init(store: PostgresStore, listener: NotificationListener) {
        self.store = store
        self.listener = listener
    }

    package static func payload(registrationID: UUID) -> String { "r:" + registrationID.uuidString.lowercased() }
    package static func payload(cookieJarOf registrationID: UUID) -> String { "c:" + registrationID.uuidString.lowercased() }
    package static func payload(token key: TokenKey?) -> String { "t:" + (key?.description ?? "*") }

    /// A not-before was recorded: every instance reloads them.
    package static let notBeforePayload = "n:"

    package static func event(_ payload: String) -> CacheEvent {
        if payload == notBeforePayload { return .notBefore }
        if payload.hasPrefix("t:") {
            let key = String(payload.dropFirst(2))
            return .token(key == "*" ? nil : key)
        }
        switch (payload.prefix(2), UUID(uuidString: String(payload.dropFirst(2)))) {
        case ("r:", let id?): return .registration(id)
        case ("c:", let id?): return .cookieJar(id)
        default: return .all
        }
    }

    public func announce(registrationID: UUID) async throws {
        try await store.notify(channel: Self.channel, payload: Self.payload(registrationID: registrationID))
    }

    public func events() -> any AsyncSequence<CacheEvent, Never> & Sendable {
        listener.notifications(channel: Self.channel).map { @Sendable event -> CacheEvent in
            switch event {
            case .listening, .reconnected, .overflowed: return .all
            case .disconnected: return .suspended
            case .notification(let payload): return Self.event(payload)
            }
        }
    }
}
