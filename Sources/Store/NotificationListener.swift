internal import CPostgres
import Foundation
public import Logging
public import ServiceLifecycle
import Synchronization

/// `LISTEN`s on one dedicated connection, on its own thread, and fans notifications out to
/// subscribers.
///
/// The thread blocks in `poll()` on the connection's socket and a wake-up pipe, so an idle
/// listener costs nothing. When the connection breaks, subscribers get ``Event/disconnected``;
/// the listener reconnects with exponential backoff, `LISTEN`s again, and sends
/// ``Event/reconnected`` — caches should flush on either, since notifications may have been
/// missed in between.
///
/// It is a `Service`: ``run()`` works until graceful shutdown or cancellation, then finishes every
/// subscriber's stream. Nothing starts before `run()`.
public final class NotificationListener: Service, Sendable {
    public enum Event: Sendable, Hashable {
        /// `LISTEN` is active for this subscription; notifications sent from now on arrive.
        case listening
        /// A `NOTIFY` on the channel, with its payload.
        case notification(String)
        /// The connection broke; notifications may be missed until ``reconnected``.
        case disconnected
        /// Listening again after a broken connection. Flush what depends on notifications.
        case reconnected
        /// This subscriber fell behind and notifications were dropped. Flush.
        case overflowed
    }

    public struct Configuration: Sendable {
        /// The first wait before reconnecting; doubled after every failed attempt.
        public var initialReconnectDelay: Duration
        /// The longest wait between attempts.
        public var maxReconnectDelay: Duration
        /// How many events a subscriber may have unread before it gets ``Event/overflowed``.
        public var bufferSize: Int

        public init(
            initialReconnectDelay: Duration = .milliseconds(100),
            maxReconnectDelay: Duration = .seconds(2),
            bufferSize: Int = 1024
        ) {
            self.initialReconnectDelay = initialReconnectDelay
            self.maxReconnectDelay = maxReconnectDelay
            self.bufferSize = bufferSize
        }
    }

    private struct Subscriber {
        let channel: String
        let continuation: AsyncStream<Event>.Continuation
        /// Got `.listening` once; later re-LISTENs are announced as `.reconnected`.
        var hasListened = false
        /// LISTEN (re-)established but not told yet.
        var needsAnnouncement = true
        /// An event was dropped; `.overflowed` is owed.
        var overflowed = false

        mutating func send(_ event: Event) {
            if overflowed {
                guard case .enqueued = continuation.yield(.overflowed) else { return }
                overflowed = false
            }
            if case .dropped = continuation.yield(event) { overflowed = true }
        }
    }

    private enum Phase {
        case idle
        case running(wakeFD: Int32)
        case stopping
        case finished
    }

    private struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var phase = Phase.idle
        /// Channels LISTENed on the current connection (owned by the thread, mirrored for tests).
        var listening: Set<String> = []
    }

    private let store: StoreConfiguration
    private let configuration: Configuration
    private let logger: Logger
    private let state = Mutex(State())

    public init(configuration store: StoreConfiguration, listener: Configuration = Configuration(), logger: Logger) {
        self.store = store
        self.configuration = listener
        self.logger = logger
    }

    // MARK: subscribing

    /// Events for `channel` (a name up to 63 bytes, matched exactly, case included). The stream
    /// starts with ``Event/listening`` once `LISTEN` is active; it ends when the listener stops or
    /// the consumer stops iterating.
    public func notifications(channel: String) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(
            bufferingPolicy: .bufferingOldest(max(1, configuration.bufferSize))
        )
        let accepted = state.withLock { state -> Int? in
            if case .finished = state.phase { return nil }
            if case .stopping = state.phase { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(channel: channel, continuation: continuation)
            if case .running(let fd) = state.phase { Self.wake(fd) }
            return id
        }
        guard let id = accepted else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.state.withLock { state in
                state.subscribers[id] = nil
                if case .running(let fd) = state.phase { Self.wake(fd) }
            }
        }
        return stream
    }

    // MARK: running

    public func run() async throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw StoreError.unavailable("could not create the listener's wake-up pipe") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        let (readFD, writeFD) = (fds[0], fds[1])
        state.withLock { state in
            guard case .idle = state.phase else { preconditionFailure("NotificationListener.run() called twice") }
            state.phase = .running(wakeFD: writeFD)
        }
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let thread = Thread { [self] in
                        self.loop(wakeFD: readFD)
                        continuation.resume()
                    }
                    thread.name = "parley-listener"
                    thread.start()
                }
            } onCancel: {
                self.requestStop()
            }
        } onGracefulShutdown: {
            self.requestStop()
        }
        let subscribers = state.withLock { state in
            state.phase = .finished
            state.listening = []
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        close(readFD)
        close(writeFD)
        for subscriber in subscribers { subscriber.continuation.finish() }
        logger.debug("notification listener stopped")
    }

    /// Channels `LISTEN`ed on the current connection.
    public var activeChannels: Set<String> { state.withLock { $0.listening } }

    private func requestStop() {
        state.withLock { state in
            if case .running(let fd) = state.phase {
                state.phase = .stopping
                Self.wake(fd)
            }
        }
    }

    private var stopRequested: Bool {
        state.withLock { state in
            if case .running = state.phase { return false }
            return true
        }
    }

    private static func wake(_ fd: Int32) {
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)  // a full pipe already means "wake up"
    }

    // MARK: the thread

    private func loop(wakeFD: Int32) {
        var connection: OpaquePointer?
        var listened: Set<String> = []
        var delay = configuration.initialReconnectDelay
        var hadConnection = false
        defer { if let connection { PQfinish(connection) } }

        while !stopRequested {
            guard let conn = connection else {
                do {
                    connection = try PostgresConnection.connect(store.connectParameters)
                    delay = configuration.initialReconnectDelay
                    if hadConnection { logger.info("notification listener reconnected") }
                    hadConnection = true
                } catch {
                    logger.warning(
                        "notification listener cannot connect; retrying",
                        metadata: ["error": "\(error)", "retry.delay": "\(delay)"]
                    )
                    waitForStop(wakeFD: wakeFD, timeout: jittered(delay))
                    delay = min(delay * 2, configuration.maxReconnectDelay)
                }
                continue
            }

            if !synchronizeChannels(conn, listened: &listened) || !drain(conn) {
                lose(&connection, &listened)
                continue
            }

            var fds = [
                pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, -1)
            if ready < 0 { continue }  // EINTR
            if fds[1].revents != 0 { drainPipe(wakeFD) }
            if fds[0].revents != 0 {
                if PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK {
                    lose(&connection, &listened)
                    continue
                }
                if !drain(conn) { lose(&connection, &listened) }
            }
        }
    }

    /// LISTEN to new channels, UNLISTEN abandoned ones, and announce to subscribers. False when
    /// the connection broke.
    private func synchronizeChannels(_ conn: OpaquePointer, listened: inout Set<String>) -> Bool {
        let wanted = state.withLock { Set($0.subscribers.values.map(\.channel)) }
        for channel in wanted.subtracting(listened).sorted() {
            guard run("LISTEN", channel, on: conn) else { return false }
            listened.insert(channel)
        }
        for channel in listened.subtracting(wanted).sorted() {
            guard run("UNLISTEN", channel, on: conn) else { return false }
            listened.remove(channel)
        }
        state.withLock { state in
            state.listening = listened
            for id in state.subscribers.keys {
                guard let subscriber = state.subscribers[id], subscriber.needsAnnouncement,
                    listened.contains(subscriber.channel)
                else { continue }
                state.subscribers[id]?.send(subscriber.hasListened ? .reconnected : .listening)
                state.subscribers[id]?.hasListened = true
                state.subscribers[id]?.needsAnnouncement = false
            }
        }
        return true
    }

    private func run(_ command: String, _ channel: String, on conn: OpaquePointer) -> Bool {
        guard let quoted = PQescapeIdentifier(conn, channel, channel.utf8.count) else {
            logger.error("cannot quote a notification channel name", metadata: ["channel": "\(channel)"])
            return PQstatus(conn) == CONNECTION_OK
        }
        let statement = command + " " + String(cString: quoted)
        PQfreemem(quoted)
        guard let result = PQexec(conn, statement) else { return false }
        defer { PQclear(result) }
        if PQresultStatus(result) != PGRES_COMMAND_OK {
            logger.warning("\(command) failed", metadata: ["channel": "\(channel)"])
        }
        return PQstatus(conn) == CONNECTION_OK
    }

    /// Hands every queued notification to its subscribers. False when the connection broke.
    private func drain(_ conn: OpaquePointer) -> Bool {
        while let notify = PQnotifies(conn) {
            let channel = String(cString: notify.pointee.relname)
            let payload = String(cString: notify.pointee.extra)
            PQfreemem(notify)
            state.withLock { state in
                for id in state.subscribers.keys where state.subscribers[id]?.channel == channel {
                    state.subscribers[id]?.send(.notification(payload))
                }
            }
        }
        return PQstatus(conn) == CONNECTION_OK
    }

    private func lose(_ connection: inout OpaquePointer?, _ listened: inout Set<String>) {
        if let conn = connection { PQfinish(conn) }
        connection = nil
        listened = []
        logger.warning("notification listener lost its connection; reconnecting")
        state.withLock { state in
            state.listening = []
            for id in state.subscribers.keys {
                if state.subscribers[id]?.hasListened == true, state.subscribers[id]?.needsAnnouncement == false {
                    state.subscribers[id]?.send(.disconnected)
                }
                state.subscribers[id]?.needsAnnouncement = true
            }
        }
    }

    /// Sleeps up to `timeout`, waking early only to stop.
    private func waitForStop(wakeFD: Int32, timeout: Duration) {
        let deadline = ContinuousClock.now + timeout
        while !stopRequested {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return }
            var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            let milliseconds = Int32(clamping: PostgresStore.nanoseconds(remaining) / 1_000_000 + 1)
            if poll(&fds, 1, milliseconds) > 0 { drainPipe(wakeFD) }
        }
    }

    private func drainPipe(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fd, &buffer, buffer.count) > 0 {}
    }

    /// ±20 % so that many instances do not reconnect in lockstep.
    private func jittered(_ delay: Duration) -> Duration {
        delay * Double.random(in: 0.8...1.2)
    }
}
