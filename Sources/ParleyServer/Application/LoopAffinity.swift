import Hummingbird
import NIOCore
import NIOPosix
import Synchronization

/// Keeps a request on the event loop it arrived on.
///
/// With `PARLEY_TASKS_ON_EVENT_LOOPS` (the default), `parley serve` makes NIO's event loops
/// Swift's global executor, so a connection's task already runs on its channel's loop. What
/// still moved a request to another thread were resumptions from threads outside the loops —
/// the curl thread handing back an upstream answer, the database pool handing back a row —
/// which the global executor sends to any loop. Under a task executor preference for the
/// current loop they come back to it: one hand-back per resumption, and the answer is
/// written from the loop that owns the channel. Without the takeover (or off a loop), the
/// work runs where it would have anyway.
public enum LoopAffinity {
    /// Runs `body` preferring the current event loop as its task executor, when there is one.
    static func run<Value>(_ body: () async throws -> Value) async throws -> Value {
        guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else { return try await body() }
        return try await withTaskExecutorPreference(EventLoopTaskExecutor.for(loop)) { try await body() }
    }

    /// Installs the singleton event loop group as Swift's global executor; false when another
    /// executor was installed first (the process then runs as without it). Once per process.
    public static func installEventLoopsAsGlobalExecutor() -> Bool {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}

/// One event loop as a `TaskExecutor`: a job enqueued from the loop itself is queued without
/// waking anything, from another thread with the loop's one wake-up.
final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    private init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    private static let cache = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    /// The executor of `loop`, made once per loop.
    static func `for`(_ loop: any EventLoop) -> EventLoopTaskExecutor {
        cache.withLock { cache in
            let key = ObjectIdentifier(loop)
            if let known = cache[key] { return known }
            let made = EventLoopTaskExecutor(loop)
            cache[key] = made
            return made
        }
    }
}

/// The outermost middleware: the request's handling prefers the loop it arrived on.
struct LoopAffinityMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await LoopAffinity.run { try await next(request, context) }
    }
}
