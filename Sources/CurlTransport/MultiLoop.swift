internal import CCurl
import Conversation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// The thread that owns the `CURLM` and every attached easy handle.
///
/// Other threads only append to `commands` (in `shared`, behind its mutex) and call
/// `curl_multi_wakeup`, which is the one multi function curl allows from another thread,
/// and only when the loop sleeps in `curl_multi_poll` (or is about to) and nobody has woken it
/// yet: under load the loop is mostly busy and takes the commands on its next round, without
/// the wake-up's write and the two reads that drain it. Everything below "multi thread only"
/// is touched by the loop thread alone.
final class MultiLoop: @unchecked Sendable {
    enum Command {
        case add(PreparedRequest, TransferState)
        case cancel(UInt64)
        case unpause(UInt64)
        /// More of a request body that is still arriving can be sent.
        case resumeUpload(UInt64)
    }

    private enum Phase {
        case idle
        case running(thread: pthread_t, multi: UnsafeMutableRawPointer)
        case stopping
        case stopped
    }

    let stats = StatsRecorder()
    private let configuration: CurlTransport.Configuration
    private let logger: Logger

    /// What other threads touch; only inside `shared.withLock`.
    private struct Shared {
        var phase: Phase = .idle
        var commands: [Command] = []
        var stopRequested = false
        /// The loop waits in `curl_multi_poll` (or is about to) and needs a wake-up to see new commands.
        var asleep = false
    }

    private let shared = Mutex(Shared())
    /// Callers of `submit` between counting a wake-up under the lock and making it.
    private let wakers = Atomic<Int>(0)

    // Multi thread only. `multi` is written before the thread starts.
    private var multi: UnsafeMutableRawPointer?
    private var transfers: [UInt64: EasyTransfer] = [:]
    private var idsByHandle: [UnsafeMutableRawPointer: UInt64] = [:]
    private var lastStallCheck = ContinuousClock.now
    private let handOvers = HandOvers()
    private var idlePollMilliseconds: Int32 {
        let (seconds, attoseconds) = configuration.idlePollInterval.components
        return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    init(configuration: CurlTransport.Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    // MARK: Any thread

    /// Queues a command and wakes the loop, starting it on the first `.add`. False once
    /// the loop is shutting down: the caller then fails the transfer itself.
    ///
    /// The wake-up (a write to curl's wake-up pipe) is made after the lock is given back, so that
    /// other threads queueing meanwhile, and the loop taking its commands, do not wait behind
    /// a system call. `wakers` keeps the multi handle alive until that write is made: it is
    /// counted under the lock while the loop runs, and the loop frees the handle only after
    /// it has seen the stop (under the same lock, so no later caller counts) and the count is 0.
    func submit(_ command: Command) -> Bool {
        enum Queued { case refused, queued, queuedToWake(UnsafeMutableRawPointer) }
        let queued = shared.withLock { shared -> Queued in
            switch shared.phase {
            case .idle:
                guard case .add = command else { return .refused }
                guard let multi = start(&shared) else { return .refused }
                shared.commands.append(command)
                curl_multi_wakeup(multi)
                return .queued
            case .running(_, let multi):
                shared.commands.append(command)
                guard shared.asleep else { return .queued }
                shared.asleep = false
                wakers.add(1, ordering: .relaxed)
                return .queuedToWake(multi)
            case .stopping, .stopped:
                return .refused
            }
        }
        switch queued {
        case .refused:
            return false
        case .queued:
            return true
        case .queuedToWake(let multi):
            curl_multi_wakeup(multi)
            wakers.subtract(1, ordering: .releasing)
            return true
        }
    }

    /// Stops the loop: in-flight transfers fail with `.cancelled`, the thread is joined and
    /// the multi handle freed. Idempotent; a second concurrent caller returns at once.
    func shutdown() {
        let thread: pthread_t? = shared.withLock { shared in
            switch shared.phase {
            case .idle:
                shared.phase = .stopped
                return nil
            case .running(let thread, let multi):
                shared.phase = .stopping
                shared.stopRequested = true
                curl_multi_wakeup(multi)
                return thread
            case .stopping, .stopped:
                return nil
            }
        }
        guard let thread else { return }
        precondition(pthread_equal(thread, pthread_self()) == 0, "CurlTransport.shutdown() called on its own thread")
        pthread_join(thread, nil)
        shared.withLock { $0.phase = .stopped }
        logger.debug("curl transport stopped")
    }

    /// Creates the multi handle and the thread. Called inside `shared.withLock`, with its state.
    private func start(_ shared: inout Shared) -> UnsafeMutableRawPointer? {
        _ = curlGlobalInit
        guard let multi = curl_multi_init() else {
            logger.error("curl_multi_init failed")
            return nil
        }
        _ = c_parley_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.maxConnectionsPerHost)
        _ = c_parley_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, configuration.maxTotalConnections)
        _ = c_parley_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, configuration.maxTotalConnections)
        self.multi = multi

        // The thread holds the loop until it returns.
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(
            &thread, nil,
            { context in
                // Named, so that `top -H` and `perf` tell it from the event loop that started it.
                _ = c_parley_name_this_thread("parley-curl")
                let loop = Unmanaged<MultiLoop>.fromOpaque(context!).takeRetainedValue()
                loop.run()
                return nil
            }, context)
        guard rc == 0 else {
            Unmanaged<MultiLoop>.fromOpaque(context).release()
            curl_multi_cleanup(multi)
            self.multi = nil
            logger.error("could not start the curl thread", metadata: ["errno": "\(rc)"])
            return nil
        }
        shared.phase = .running(thread: thread, multi: multi)
        logger.debug("curl transport started")
        return multi
    }

    // MARK: Multi thread only

    private func run() {
        guard let multi else { return }
        var batch: [Command] = []
        while true {
            let stopping = shared.withLock { shared -> Bool in
                swap(&batch, &shared.commands)
                shared.asleep = false
                return shared.stopRequested
            }
            for command in batch { handle(command, multi: multi) }
            batch.removeAll(keepingCapacity: true)
            if stopping { break }

            var running: Int32 = 0
            let performed = curl_multi_perform(multi, &running)
            if performed != CURLM_OK {
                logger.error("curl_multi_perform failed", metadata: ["curl.multi_code": "\(performed.rawValue)"])
            }
            // What this round (and an unpause above) buffered goes to its waiters, each once.
            handOvers.run()
            collectFinished(multi)
            endStalledReaders(multi)
            // Commands that came during this round are taken at once; otherwise the loop sleeps,
            // and from now on a command wakes it.
            let sleeps = shared.withLock { shared -> Bool in
                guard shared.commands.isEmpty && !shared.stopRequested else { return false }
                shared.asleep = true
                return true
            }
            // Returns on socket activity, a curl timer, a wakeup, or after `idlePollInterval`.
            if sleeps { _ = curl_multi_poll(multi, nil, 0, idlePollMilliseconds, nil) }
        }

        for transfer in Array(transfers.values) {
            retire(transfer, multi: multi, error: TransportError(.cancelled, detail: "\(transfer.request.host): transport shut down"))
        }
        // A caller that counted its wake-up before the stop is between two instructions of its own.
        while wakers.load(ordering: .acquiring) > 0 { sched_yield() }
        curl_multi_cleanup(multi)
        self.multi = nil
    }

    private func handle(_ command: Command, multi: UnsafeMutableRawPointer) {
        switch command {
        case .add(let request, let state):
            if state.isCancelled {
                state.finish(nil)  // reports .cancelled
                return
            }
            let transfer: EasyTransfer
            do {
                transfer = try EasyTransfer.make(
                    request: request, state: state, configuration: configuration, waiting: handOvers, logger: logger)
            } catch {
                logger.debug(
                    "upstream request not started",
                    metadata: ["upstream.host": "\(request.host)", "error.code": "\(error.code)", "transfer.id": "\(state.id)"]
                )
                state.finish(error)
                return
            }
            let added = curl_multi_add_handle(multi, transfer.handle)
            guard added == CURLM_OK else {
                transfer.release()
                state.finish(TransportError(.unavailable, detail: "\(request.host): curl_multi_add_handle failed", mayHaveReachedPeer: false))
                return
            }
            transfers[state.id] = transfer
            idsByHandle[transfer.handle] = state.id
            stats.transferStarted()

        case .cancel(let id):
            guard let transfer = transfers[id] else { return }  // already finished
            retire(transfer, multi: multi, error: nil)  // state reports .cancelled

        case .unpause(let id):
            guard let transfer = transfers[id] else { return }
            transfer.pausedSince = nil
            // May run the write callback right here with the bytes curl held back.
            _ = curl_easy_pause(transfer.handle, c_parley_pause_cont())

        case .resumeUpload(let id):
            guard let transfer = transfers[id] else { return }
            // Receiving stays paused while a slow reader holds it back; sending resumes.
            _ = curl_easy_pause(transfer.handle, transfer.pausedSince == nil ? c_parley_pause_cont() : c_parley_pause_recv())
        }
    }

    private func collectFinished(_ multi: UnsafeMutableRawPointer) {
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi, &queued) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                let id = idsByHandle[handle], let transfer = transfers[id]
            else { continue }
            let code = c_parley_msg_result(message)
            // `message` is invalid once the handle is removed: everything is read above.
            var error: TransportError?
            if let reason = transfer.headFailure {
                error = TransportError(.invalidResponse, detail: "\(transfer.request.host): \(reason)")
            } else if code != CURLE_OK {
                // Bytes of the request handed to the connection (0: it never left, so it may be
                // sent again safely; a failed read of the counter counts as "may have").
                var sent = -1
                _ = c_parley_easy_getinfo_long(transfer.handle, CURLINFO_REQUEST_SIZE, &sent)
                error = CurlErrors.error(for: code, host: transfer.request.host, requestSent: sent != 0)
            }
            retire(transfer, multi: multi, error: error)
        }
    }

    /// Ends transfers paused longer than the deadline because their reader stopped
    /// reading: they hold a connection and a buffer for a client that is gone or stuck.
    /// Looks at most once a second (less often when nothing wakes the loop sooner than
    /// `idlePollInterval`).
    private func endStalledReaders(_ multi: UnsafeMutableRawPointer) {
        let now = ContinuousClock.now
        guard now - lastStallCheck >= .seconds(1) else { return }
        lastStallCheck = now
        let deadline = configuration.pausedTransferDeadline
        for transfer in Array(transfers.values) {
            guard let since = transfer.pausedSince, now - since >= deadline else { continue }
            retire(transfer, multi: multi, error: TransportError(.timeout, detail: "\(transfer.request.host): the client stopped reading the response"))
        }
    }

    /// Detaches and frees one transfer, then ends its state. The only place an attached
    /// easy handle is freed.
    private func retire(_ transfer: EasyTransfer, multi: UnsafeMutableRawPointer, error: TransportError?) {
        var connects = 0
        _ = c_parley_easy_getinfo_long(transfer.handle, CURLINFO_NUM_CONNECTS, &connects)
        var status = 0
        let logsDebug = logger.logLevel <= .debug
        if logsDebug { _ = c_parley_easy_getinfo_long(transfer.handle, CURLINFO_RESPONSE_CODE, &status) }
        _ = curl_multi_remove_handle(multi, transfer.handle)
        idsByHandle[transfer.handle] = nil
        transfers[transfer.state.id] = nil
        transfer.release()
        stats.transferRetired(connections: connects)

        if logsDebug {
            var metadata: Logger.Metadata = [
                "upstream.host": "\(transfer.request.host)", "transfer.id": "\(transfer.state.id)",
                "http.status": "\(status)", "upstream.new_connections": "\(connects)",
            ]
            if let error {
                metadata["error.code"] = "\(error.code)"
                metadata["error.detail"] = "\(error.detail)"
            }
            logger.debug("upstream transfer finished", metadata: metadata)
        }
        transfer.state.finish(error)
    }
}

/// Transfers whose waiter (a held head's caller, a parked reader) has bytes to collect,
/// gathered during one round of curl callbacks. Multi thread only.
final class HandOvers {
    private var states: [TransferState] = []

    func append(_ state: TransferState) { states.append(state) }

    /// Hands every gathered transfer's bytes over (a transfer listed twice finds nothing
    /// left the second time).
    func run() {
        guard !states.isEmpty else { return }
        for state in states { state.handOver() }
        states.removeAll(keepingCapacity: true)
    }
}
