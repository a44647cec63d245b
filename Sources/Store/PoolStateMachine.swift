/// The pool's bookkeeping as a value: every event returns the action to perform, which the pool
/// runs after it has let go of its lock (postgres-nio's `ConnectionPool` works the same way).
///
/// A *slot* is the right to hold one connection. `open` counts slots in use: idle connections,
/// leased connections and connection attempts (`connecting`). It never exceeds `maxConnections`.
/// A caller who gets `.connect` owns a slot and must report `connectSucceeded()` or
/// `connectFailed()`.
///
/// When an attempt fails while the pool holds no established connection, the database is taken
/// to be unreachable and every waiter fails at once rather than inheriting the slot and waiting
/// out another connect timeout: calls fail fast during an outage, and the next caller tries again.
struct PoolStateMachine<Connection, Waiter> {
    enum Grant {
        /// Use this idle connection (check it is still alive first).
        case connection(Connection)
        /// Open a new connection in the slot reserved for you.
        case connect
    }

    enum AcquireAction {
        case grant(Grant)
        /// The pool is full: queue with `enqueue`.
        case mustWait
        case shutDown
    }

    enum EnqueueAction {
        case grant(Grant)
        case queued
        case shutDown
    }

    struct ReleaseAction {
        /// A connection to close.
        var close: Connection?
        /// A waiter to resume with a grant.
        var resume: (Waiter, Grant)?
        /// The pool is shut down and now empty: resume whoever waits in `shutdown`.
        var drained: Bool = false
    }

    struct ShutdownAction {
        var close: [Connection]
        var fail: [Waiter]
        var drained: Bool
    }

    let maxConnections: Int
    private(set) var open = 0
    private(set) var connecting = 0
    private(set) var peakOpen = 0
    private var idle: [Connection] = []
    private var waiters: [(id: Int, waiter: Waiter)] = []
    private(set) var isShutDown = false

    init(maxConnections: Int) {
        self.maxConnections = max(1, maxConnections)
    }

    var idleCount: Int { idle.count }
    var waitingCount: Int { waiters.count }

    /// A caller wants a connection, without waiting yet.
    mutating func acquire() -> AcquireAction {
        if isShutDown { return .shutDown }
        if let grant = grantIfPossible() { return .grant(grant) }
        return .mustWait
    }

    /// A caller is ready to wait. Checks again: things may have changed since `acquire`.
    mutating func enqueue(id: Int, waiter: Waiter) -> EnqueueAction {
        if isShutDown { return .shutDown }
        if waiters.isEmpty, let grant = grantIfPossible() { return .grant(grant) }
        waiters.append((id, waiter))
        return .queued
    }

    /// A waiter gave up (timeout or cancellation). Returns it when it was still waiting.
    mutating func removeWaiter(id: Int) -> Waiter? {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return waiters.remove(at: index).waiter
    }

    /// A leased connection comes back. `reusable` is false when it broke or is mid-transaction.
    mutating func release(_ connection: Connection, reusable: Bool) -> ReleaseAction {
        if reusable, !isShutDown {
            if !waiters.isEmpty {
                let next = waiters.removeFirst().waiter
                return ReleaseAction(resume: (next, .connection(connection)))
            }
            idle.append(connection)
            return ReleaseAction()
        }
        open -= 1
        var action = ReleaseAction(close: connection)
        if isShutDown {
            action.drained = open == 0
        } else if !waiters.isEmpty {
            // The freed slot goes to the longest waiter, who connects.
            open += 1
            connecting += 1
            action.resume = (waiters.removeFirst().waiter, .connect)
        }
        return action
    }

    struct ConnectFailedAction {
        /// The waiter who inherits the slot and connects.
        var resume: Waiter?
        /// Waiters to fail with the connection error: nothing established is left to serve them.
        var fail: [Waiter] = []
        var drained = false
    }

    mutating func connectSucceeded() {
        connecting -= 1
    }

    /// A connection attempt in a granted slot failed; `unreachable` is false when it was only
    /// cancelled.
    mutating func connectFailed(unreachable: Bool) -> ConnectFailedAction {
        open -= 1
        connecting -= 1
        if isShutDown { return ConnectFailedAction(drained: open == 0) }
        guard !waiters.isEmpty else { return ConnectFailedAction() }
        if unreachable, open - connecting == 0 {
            let fail = waiters.map(\.waiter)
            waiters.removeAll()
            return ConnectFailedAction(fail: fail)
        }
        open += 1
        connecting += 1
        return ConnectFailedAction(resume: waiters.removeFirst().waiter)
    }

    /// A granted idle connection turned out dead: its slot becomes a connection attempt.
    mutating func replacingDeadConnection() {
        connecting += 1
    }

    /// Stop: idle connections close, waiters fail, leased connections close when they return.
    mutating func shutdown() -> ShutdownAction {
        if isShutDown { return ShutdownAction(close: [], fail: [], drained: open == 0) }
        isShutDown = true
        let close = idle
        idle.removeAll()
        open -= close.count
        let fail = waiters.map(\.waiter)
        waiters.removeAll()
        return ShutdownAction(close: close, fail: fail, drained: open == 0)
    }

    private mutating func grantIfPossible() -> Grant? {
        if let connection = idle.popLast() { return .connection(connection) }
        if open < maxConnections {
            open += 1
            connecting += 1
            peakOpen = max(peakOpen, open)
            return .connect
        }
        return nil
    }
}
