public import Conversation
public import Logging

/// A `Transport` over libcurl's multi interface.
///
/// One `CURLM` is driven by one dedicated thread (never a NIO event loop, never the
/// Swift cooperative pool). Callers talk to it through a locked command queue and
/// `curl_multi_wakeup`. The thread starts lazily, on the first `send`, so a transport
/// that is configured but never used costs nothing; `shutdown()` stops it.
///
/// `send` returns once the final response head is known; the body then streams through
/// a bounded buffer (see `Configuration.highWaterMark`). Redirects are never followed and
/// server certificates are always verified.
public final class CurlTransport: Transport {
    public struct Configuration: Sendable, Equatable {
        /// Connections kept open to one host (`CURLMOPT_MAX_HOST_CONNECTIONS`).
        public var maxConnectionsPerHost: Int
        /// Connections open in total (`CURLMOPT_MAX_TOTAL_CONNECTIONS`, also the cache size).
        public var maxTotalConnections: Int
        /// A transfer is paused once this many response bytes wait for the reader.
        public var highWaterMark: Int
        /// A paused transfer resumes once the reader has drained the buffer to this size.
        public var lowWaterMark: Int
        /// Honour `http_proxy`/`https_proxy`/`no_proxy` from the environment. Off by default:
        /// upstream calls go direct unless a deployment opts in.
        public var useEnvironmentProxy: Bool
        /// A transfer paused this long because its reader stopped reading ends with
        /// `.timeout` (curl's idle limit exempts paused transfers).
        public var pausedTransferDeadline: Duration
        /// A response whose `Content-Length` is at most this is handed to the caller whole,
        /// head and body together, once it has arrived (one hand-back instead of two or
        /// more); 0 hands every head over at once. Above `highWaterMark`, that is used.
        public var wholeBodyBytes: Int
        /// The longest the transfer thread sleeps in `curl_multi_poll` when no socket, curl
        /// timer or command wakes it; stalled readers are looked for at most this often.
        public var idlePollInterval: Duration

        public init(
            maxConnectionsPerHost: Int = 32,
            maxTotalConnections: Int = 256,
            highWaterMark: Int = 256 * 1024,
            lowWaterMark: Int = 64 * 1024,
            useEnvironmentProxy: Bool = false,
            pausedTransferDeadline: Duration = .seconds(60),
            wholeBodyBytes: Int = 64 * 1024,
            idlePollInterval: Duration = .seconds(1)
        ) {
            self.idlePollInterval = idlePollInterval
            self.wholeBodyBytes = wholeBodyBytes
            self.pausedTransferDeadline = pausedTransferDeadline
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.maxTotalConnections = maxTotalConnections
            self.highWaterMark = highWaterMark
            self.lowWaterMark = lowWaterMark
            self.useEnvironmentProxy = useEnvironmentProxy
        }

        /// Every problem with the configuration, empty when it is usable.
        public var problems: [String] {
            var out: [String] = []
            if maxConnectionsPerHost < 1 { out.append("maxConnectionsPerHost must be at least 1") }
            if maxTotalConnections < maxConnectionsPerHost {
                out.append("maxTotalConnections must be at least maxConnectionsPerHost")
            }
            if highWaterMark < 1 { out.append("highWaterMark must be at least 1") }
            if lowWaterMark < 0 || lowWaterMark >= highWaterMark {
                out.append("lowWaterMark must be in 0..<highWaterMark")
            }
            if wholeBodyBytes < 0 { out.append("wholeBodyBytes must not be negative") }
            if idlePollInterval < .milliseconds(1) || idlePollInterval > .seconds(3600) {
                out.append("idlePollInterval must be between 1 ms and 1 hour")
            }
            return out
        }
    }

    /// Counters for tests and metrics; a snapshot, taken under a lock.
    public struct Statistics: Sendable, Equatable {
        /// Transfers handed to the multi handle.
        public var transfersStarted: Int = 0
        /// Transfers still attached to the multi handle.
        public var transfersActive: Int = 0
        /// New connections made (sum of `CURLINFO_NUM_CONNECTS` of finished transfers).
        public var connectionsOpened: Int = 0
        /// Response bytes buffered for readers right now, over all transfers.
        public var bufferedBytes: Int = 0
        /// The highest `bufferedBytes` observed.
        public var maxBufferedBytes: Int = 0

        public init() {}
    }

    public let configuration: Configuration
    private let loop: MultiLoop
    private let logger: Logger

    /// - Precondition: `configuration.problems` is empty.
    public init(configuration: Configuration = .init(), logger: Logger) {
        let problems = configuration.problems
        precondition(problems.isEmpty, "invalid CurlTransport configuration: \(problems.joined(separator: "; "))")
        self.configuration = configuration
        self.logger = logger
        self.loop = MultiLoop(configuration: configuration, logger: logger)
    }

    /// Stops the thread if `shutdown()` was not called.
    deinit { loop.shutdown() }

    public var statistics: Statistics { loop.stats.snapshot }

    /// Fails in-flight transfers with `.cancelled`, joins the thread and frees the multi
    /// handle. Idempotent; later `send`s fail with `.cancelled`. Blocks for as long as the
    /// thread needs to notice (one `curl_multi_wakeup`), so call it from shutdown code.
    public func shutdown() {
        loop.shutdown()
    }

    public func send(_ request: UpstreamRequest) async throws -> UpstreamResponse {
        let prepared = try PreparedRequest(request)
        let state = TransferState(
            id: loop.stats.nextTransferID(), host: prepared.host, loop: loop,
            highWaterMark: configuration.highWaterMark, lowWaterMark: configuration.lowWaterMark
        )
        logger.debug(
            "upstream request",
            metadata: ["upstream.host": "\(prepared.host)", "http.method": "\(prepared.method)", "transfer.id": "\(state.id)"]
        )
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<UpstreamResponse, any Error>) in
                guard state.installHeadWaiter(continuation) else { return }
                if !loop.submit(.add(prepared, state)) {
                    state.finish(TransportError(.cancelled, detail: "\(prepared.host): transport is shut down or could not start"))
                }
            }
        } onCancel: {
            state.cancel()
        }
    }
}
