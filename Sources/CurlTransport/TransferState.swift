import Conversation
import Synchronization

/// Counters shared by the caller's side and the multi thread.
final class StatsRecorder: Sendable {
    private struct Counters {
        var stats = CurlTransport.Statistics()
        var lastID: UInt64 = 0
    }

    private let counters = Mutex(Counters())

    var snapshot: CurlTransport.Statistics { counters.withLock { $0.stats } }

    func nextTransferID() -> UInt64 {
        counters.withLock {
            $0.lastID += 1
            return $0.lastID
        }
    }

    func transferStarted() {
        counters.withLock {
            $0.stats.transfersStarted += 1
            $0.stats.transfersActive += 1
        }
    }

    func transferRetired(connections: Int) {
        counters.withLock {
            $0.stats.transfersActive -= 1
            $0.stats.connectionsOpened += connections
        }
    }

    func buffered(_ delta: Int) {
        counters.withLock {
            $0.stats.bufferedBytes += delta
            $0.stats.maxBufferedBytes = max($0.stats.maxBufferedBytes, $0.stats.bufferedBytes)
        }
    }
}

/// What one transfer shares between the multi thread (which writes bytes and ends it) and
/// its caller (who waits for the head, then reads the body). Every changing field is in
/// `shared`, behind its mutex; continuations are resumed after the mutex is released.
final class TransferState: Sendable {
    let id: UInt64
    let host: String
    private let loop: MultiLoop
    private let highWaterMark: Int
    private let lowWaterMark: Int

    private struct Shared {
        var headWaiter: CheckedContinuation<UpstreamResponse, any Error>?
        var headDelivered = false
        var chunks: [[UInt8]] = []
        var buffered = 0
        /// The write callback returned CURL_WRITEFUNC_PAUSE and no unpause was asked for yet.
        var paused = false
        var cancelled = false
        /// Set once, by `finish`: nil while the transfer runs, `.some(nil)` on success.
        var ending: TransportError??
        var readerWaiter: CheckedContinuation<[UInt8]?, any Error>?
        /// A head kept back until its whole (small) body is buffered, so the caller gets both
        /// with one hand-back; `heldUntil` is the body's announced length.
        var heldHead: UpstreamResponse?
        var heldUntil = 0
    }

    /// Taken before the statistics mutex when both are needed, never after it.
    private let shared = Mutex(Shared())

    init(id: UInt64, host: String, loop: MultiLoop, highWaterMark: Int, lowWaterMark: Int) {
        self.id = id
        self.host = host
        self.loop = loop
        self.highWaterMark = highWaterMark
        self.lowWaterMark = lowWaterMark
    }

    private var cancelledError: TransportError {
        TransportError(.cancelled, detail: "\(host): request cancelled")
    }

    // MARK: Caller side

    /// Parks `send` until the head arrives. Returns false (having resumed the continuation)
    /// when the transfer was cancelled or ended first.
    func installHeadWaiter(_ continuation: CheckedContinuation<UpstreamResponse, any Error>) -> Bool {
        let early: TransportError? = shared.withLock { shared in
            if shared.cancelled { return cancelledError }
            if let ending = shared.ending { return ending ?? TransportError(.unavailable, detail: "\(host): no response head") }
            shared.headWaiter = continuation
            return nil
        }
        if let early {
            continuation.resume(throwing: early)
            return false
        }
        return true
    }

    var isCancelled: Bool { shared.withLock { $0.cancelled } }

    /// The reader (or the task awaiting the head) is gone. The multi thread removes the
    /// transfer and then resumes whoever still waits, so that statistics are settled by then.
    func cancel() {
        let needsRemoval = shared.withLock { shared -> Bool in
            if shared.cancelled { return false }
            shared.cancelled = true
            if shared.buffered > 0 { loop.stats.buffered(-shared.buffered) }
            shared.chunks = []
            shared.buffered = 0
            return shared.ending == nil
        }
        guard needsRemoval else { return }
        if !loop.submit(.cancel(id)) {
            finish(cancelledError)
        }
    }

    /// The next chunk of the body; nil at its end.
    func next() async throws -> [UInt8]? {
        switch takeAvailable() {
        case .bytes(let bytes): return bytes
        case .end: return nil
        case .failed(let error): throw error
        case .wait: break
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8]?, any Error>) in
                switch takeAvailable(orPark: continuation) {
                case .bytes(let bytes): continuation.resume(returning: bytes)
                case .end: continuation.resume(returning: nil)
                case .failed(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        } onCancel: {
            self.cancel()
        }
    }

    private enum Available {
        case bytes([UInt8])
        case end
        case failed(TransportError)
        case wait
    }

    private func takeAvailable(orPark continuation: CheckedContinuation<[UInt8]?, any Error>? = nil) -> Available {
        var unpause = false
        let result = shared.withLock { shared -> Available in
            if shared.cancelled {
                // Report the cancellation only once the multi thread has detached the
                // transfer (`finish`), so that a caller who sees it sees a settled state.
                if shared.ending != nil { return .failed(cancelledError) }
                if let continuation { shared.readerWaiter = continuation }
                return .wait
            }
            if !shared.chunks.isEmpty {
                return .bytes(takeChunks(&shared, unpause: &unpause))
            }
            if let ending = shared.ending {
                if let error = ending { return .failed(error) }
                return .end
            }
            if let continuation {
                precondition(shared.readerWaiter == nil, "a response body has one reader")
                shared.readerWaiter = continuation
            }
            return .wait
        }
        if unpause { _ = loop.submit(.unpause(id)) }
        return result
    }

    /// A request body still being written has more bytes (or its end): the multi thread
    /// resumes sending. Called from the body's writer, any thread.
    func resumeUpload() {
        _ = loop.submit(.resumeUpload(id))
    }

    // MARK: Multi thread side

    /// The final head. With `wholeBodyLength` (a small body of announced length), the head is
    /// kept until that many bytes are buffered or the transfer ends: `handOver` then gives the
    /// caller head and body together.
    func deliverHead(_ response: UpstreamResponse, wholeBodyLength: Int? = nil) {
        let waiter = shared.withLock { shared -> CheckedContinuation<UpstreamResponse, any Error>? in
            shared.headDelivered = true
            if let wholeBodyLength, wholeBodyLength > shared.buffered {
                shared.heldHead = response
                shared.heldUntil = wholeBodyLength
                return nil
            }
            defer { shared.headWaiter = nil }
            return shared.headWaiter
        }
        waiter?.resume(returning: response)
    }

    enum Offer {
        case accepted
        /// Accepted, and someone waits for it: call `handOver()` once curl's round is over.
        case acceptedForWaiter
        case pause
        case abort
    }

    /// Bytes from the write callback. Above the high-water mark they are refused with a
    /// pause, and curl delivers them again after `curl_easy_pause(CURLPAUSE_CONT)`. Nothing
    /// is resumed here: the multi thread calls `handOver()` after the round of callbacks, so
    /// that everything one round brought goes to the reader with one resumption.
    func offer(_ bytes: UnsafeRawBufferPointer) -> Offer {
        shared.withLock { shared -> Offer in
            if shared.cancelled { return .abort }
            if shared.buffered >= highWaterMark {
                shared.paused = true
                return .pause
            }
            let copy = [UInt8](unsafeUninitializedCapacity: bytes.count) { buffer, count in
                if let base = bytes.baseAddress, let target = buffer.baseAddress, bytes.count > 0 {
                    UnsafeMutableRawPointer(target).copyMemory(from: base, byteCount: bytes.count)
                }
                count = bytes.count
            }
            shared.chunks.append(copy)
            shared.buffered += copy.count
            loop.stats.buffered(copy.count)
            if shared.readerWaiter != nil { return .acceptedForWaiter }
            if shared.heldHead != nil && shared.buffered >= shared.heldUntil { return .acceptedForWaiter }
            return .accepted
        }
    }

    /// Resumes whoever waits for what `offer` buffered: the caller waiting for a held head once
    /// its body is whole, or the reader with every buffered chunk joined. Multi thread, after
    /// a round of callbacks.
    func handOver() {
        var head: (CheckedContinuation<UpstreamResponse, any Error>, UpstreamResponse)?
        var reader: (CheckedContinuation<[UInt8]?, any Error>, [UInt8])?
        var unpause = false
        // Taken out of the lock whole: the last copy of a response must not go inside it (its
        // body's source cancels the transfer when it goes, which takes the lock).
        var taken: UpstreamResponse?
        shared.withLock { shared in
            if let held = shared.heldHead, shared.buffered >= shared.heldUntil {
                taken = held
                shared.heldHead = nil
                if let waiter = shared.headWaiter { head = (waiter, held) }
                shared.headWaiter = nil
            }
            if let waiter = shared.readerWaiter, !shared.chunks.isEmpty {
                shared.readerWaiter = nil
                reader = (waiter, takeChunks(&shared, unpause: &unpause))
            }
        }
        if let (waiter, response) = head { waiter.resume(returning: response) }
        if let (waiter, bytes) = reader { waiter.resume(returning: bytes) }
        if unpause { _ = loop.submit(.unpause(id)) }
        withExtendedLifetime(taken) {}
    }

    /// Every buffered chunk as one array, the buffer emptied. Inside `shared.withLock`.
    private func takeChunks(_ shared: inout Shared, unpause: inout Bool) -> [UInt8] {
        let out: [UInt8]
        if shared.chunks.count == 1 {
            out = shared.chunks[0]
        } else {
            var joined: [UInt8] = []
            joined.reserveCapacity(shared.buffered)
            for chunk in shared.chunks { joined.append(contentsOf: chunk) }
            out = joined
        }
        shared.chunks.removeAll(keepingCapacity: true)
        loop.stats.buffered(-shared.buffered)
        shared.buffered = 0
        if shared.paused && shared.buffered <= lowWaterMark {
            shared.paused = false
            unpause = true
        }
        return out
    }

    /// The transfer is over (done, failed, cancelled or never started). Called once the
    /// easy handle is gone; idempotent.
    func finish(_ error: TransportError?) {
        var head: CheckedContinuation<UpstreamResponse, any Error>?
        // Out of the lock whole (see `handOver`); dropped after it when nobody takes it.
        var held: UpstreamResponse?
        var cancelled = false
        var reader: CheckedContinuation<[UInt8]?, any Error>?
        var last: [UInt8]?
        var unpause = false  // the transfer is gone: nothing left to unpause
        let outcome: TransportError? = shared.withLock { shared in
            if shared.ending != nil { return nil }
            cancelled = shared.cancelled
            let outcome = shared.cancelled ? cancelledError : error
            shared.ending = .some(outcome)
            head = shared.headWaiter
            shared.headWaiter = nil
            // A held head goes out with what arrived of its body; the body's reader then meets
            // the ending (a short body fails there, as it would have streamed).
            held = shared.heldHead
            shared.heldHead = nil
            reader = shared.readerWaiter
            shared.readerWaiter = nil
            if reader != nil, !shared.chunks.isEmpty { last = takeChunks(&shared, unpause: &unpause) }
            return outcome
        }
        if cancelled { held = nil }
        if let head {
            if let held {
                head.resume(returning: held)
            } else {
                head.resume(throwing: outcome ?? TransportError(.unavailable, detail: "\(host): response ended without a head"))
            }
        }
        if let reader {
            if let last {
                reader.resume(returning: last)
            } else if let outcome {
                reader.resume(throwing: outcome)
            } else {
                reader.resume(returning: nil)
            }
        }
    }
}

/// The body of one curl transfer. Dropping it cancels the transfer.
final class CurlBodySource: ResponseBodySource {
    private let state: TransferState

    init(state: TransferState) { self.state = state }

    deinit { state.cancel() }

    func next() async throws -> [UInt8]? { try await state.next() }

    func cancel() { state.cancel() }
}
