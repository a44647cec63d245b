public import HummingbirdCore
import Logging
public import NIOCore
import Synchronization

/// One event loop as a `TaskExecutor`: a job enqueued from the loop itself is queued without
/// waking anything, from another thread with the loop's one wake-up.
public final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    private init(_ loop: any EventLoop) { self.loop = loop }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    private static let cache = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    /// The executor of `loop`, made once per loop.
    public static func `for`(_ loop: any EventLoop) -> EventLoopTaskExecutor {
        cache.withLock { cache in
            let key = ObjectIdentifier(loop)
            if let known = cache[key] { return known }
            let made = EventLoopTaskExecutor(loop)
            cache[key] = made
            return made
        }
    }
}

/// A server child channel whose whole handling prefers the channel's own event loop
/// (`PARLEY_TASKS_ON_EVENT_LOOPS`, the default).
///
/// Under this task executor preference every step of a connection runs on the loop that
/// owns it: reading each request, the handler, every resumption from a thread outside the
/// loops (the curl thread handing back an upstream answer, the database pool a row: one
/// hand-back each) and the answer's writing. Without it, the connection's task runs on
/// Swift's thread pool, and each part read or written crosses between that pool and the
/// loop. The services' own tasks keep to Swift's pool.
struct LoopBoundChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(EventLoopTaskExecutor.for(value.channel.eventLoop)) {
            await inner.handle(value: value, logger: logger)
        }
    }
}

extension HTTPServerBuilder {
    /// HTTP/1.1 as `.http1(configuration:)` builds it, each connection kept on its loop.
    public static func http1OnItsLoop(configuration: HTTP1Channel.Configuration) -> HTTPServerBuilder {
        .init { responder in LoopBoundChannel(inner: HTTP1Channel(responder: responder, configuration: configuration)) }
    }
}
