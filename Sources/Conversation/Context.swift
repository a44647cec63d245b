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
    /// The manager the conversation runs on …
    private let base: ConversationManager
    /// … and how many of its request filters this view leaves out.
    private let dropped: Int
    private let state: StateBox

    /// The manager without the request filters that already ran (nor the one running): side
    /// requests go through it, as the seed describes. Made when a filter asks (a CSRF fetch),
    /// not for every filter of every conversation.
    public var manager: ConversationManager { dropped == 0 ? base : base.droppingRequestFilters(dropped) }

    /// Who the conversation runs for (the manager's party), without making the side-request manager.
    public var party: (any ConversationParty)? { base.party }

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
        self.base = manager
        self.dropped = 0
        self.state = StateBox()
    }

    private init(id: String, base: ConversationManager, dropped: Int, state: StateBox) {
        self.id = id
        self.base = base
        self.dropped = dropped
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

    /// The same conversation as the request filter at `count - 1` sees it: its side requests
    /// go through the manager without that filter and the ones before it.
    func dropping(_ count: Int) -> Conversation {
        Conversation(id: id, base: base, dropped: dropped + count, state: state)
    }
}
