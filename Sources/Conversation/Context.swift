import Synchronization

/// A key in the conversation context. The value type is fixed by the key, so
/// reading a value needs no casts and a wrong type cannot be stored.
public protocol ConversationContextKey: Sendable {
    associatedtype Value: Sendable
}

/// A typed map that lives as long as one conversation: it survives restarts
/// and dies with the conversation. Filters use it for per-conversation facts
/// ("Basic was tried", "CSRF was refetched").
public struct ConversationContext: Sendable {
    private var values: [ObjectIdentifier: any Sendable] = [:]

    public init() {}

    public subscript<Key: ConversationContextKey>(_ key: Key.Type) -> Key.Value? {
        get { values[ObjectIdentifier(key)] as? Key.Value }
        set { values[ObjectIdentifier(key)] = newValue }
    }
}

/// What a filter sees of the conversation it runs in.
public final class Conversation: Sendable {
    public let id: String
    /// A copy of the manager without the request filters that already ran (nor the
    /// one running): side requests go through it, as the seed describes.
    public let manager: ConversationManager
    private let state: StateBox

    struct State {
        var context = ConversationContext()
        var restarts = 0
        var failureCounts: [String: Int] = [:]
    }

    /// One per conversation; every view of the conversation shares it.
    final class StateBox: Sendable {
        let mutex = Mutex(State())
        func withLock<R>(_ body: (inout State) -> R) -> R { mutex.withLock { body(&$0) } }
    }

    init(id: String, manager: ConversationManager) {
        self.id = id
        self.manager = manager
        self.state = StateBox()
    }

    private init(id: String, manager: ConversationManager, state: StateBox) {
        self.id = id
        self.manager = manager
        self.state = state
    }

    public subscript<Key: ConversationContextKey>(_ key: Key.Type) -> Key.Value? {
        get { state.withLock { $0.context[key] } }
        set { state.withLock { $0.context[key] = newValue } }
    }

    /// How many restarts this conversation has made so far.
    public var restarts: Int { state.withLock { $0.restarts } }

    /// How often credentials were already offered for this protection space in
    /// this conversation (the seed's `previousFailureCount`).
    public func previousFailureCount(for space: ProtectionSpace) -> Int {
        state.withLock { $0.failureCounts[space.key, default: 0] }
    }

    func recordAttempt(for space: ProtectionSpace) {
        state.withLock { $0.failureCounts[space.key, default: 0] += 1 }
    }

    func recordRestart() -> Int {
        state.withLock {
            $0.restarts += 1
            return $0.restarts
        }
    }

    /// The same conversation seen with another manager (for a filter's side requests).
    func withManager(_ manager: ConversationManager) -> Conversation {
        Conversation(id: id, manager: manager, state: state)
    }
}
