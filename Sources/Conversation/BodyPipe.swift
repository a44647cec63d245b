import Synchronization

/// A request body that passes through once, kept nowhere: its writer (the client's body as
/// it arrives) hands over batches, its one reader (the transfer sending it upstream) takes
/// them, and at most `capacity` bytes wait between the two; the writer waits for room.
/// Only for a conversation that cannot send its request twice: nothing here can be read
/// again.
///
/// The reader's side ends with `close()` (the transfer is over, or never started): from
/// then on the writer's batches are dropped and it never waits, so a client's body can
/// always be read to its end.
public final class BodyPipe: Sendable {
    /// Bytes that may wait for the reader before the writer waits.
    public let capacity: Int
    private let state = Mutex(State())

    private struct State {
        var batches: [[UInt8]] = []
        /// Bytes of `batches[0]` already read.
        var head = 0
        var buffered = 0
        var outcome: Outcome?
        var closed = false
        /// Bytes the reader has taken.
        var taken: Int64 = 0
        var reader: (@Sendable () -> Void)?
        var writer: CheckedContinuation<Void, Never>?

        enum Outcome { case complete, failed }
    }

    /// What a read found.
    public enum Read: Sendable, Equatable {
        /// This many bytes were copied.
        case bytes(Int)
        /// The body is whole and every byte was read.
        case end
        /// Nothing to read yet: the `wake` given is called once there is (or the end, or a failure).
        case wait
        /// The writer gave up (the client's body broke off), or the pipe was closed: the body
        /// will never be whole.
        case failed
    }

    public init(capacity: Int = 1 << 20) {
        self.capacity = max(1, capacity)
    }

    // MARK: Writer

    /// Hands `batch` to the reader; returns once fewer than `capacity` bytes wait (at once
    /// when the reader is gone). False when the reader is gone and the batch was dropped.
    @discardableResult
    public func write(_ batch: [UInt8]) async -> Bool {
        guard !batch.isEmpty else { return true }
        let (accepted, wake) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard !state.closed, state.outcome == nil else { return (false, nil) }
            state.batches.append(batch)
            state.buffered += batch.count
            defer { state.reader = nil }
            return (true, state.reader)
        }
        wake?()
        guard accepted else { return false }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let parked = state.withLock { state -> Bool in
                guard !state.closed, state.buffered >= capacity else { return false }
                state.writer = continuation
                return true
            }
            if !parked { continuation.resume() }
        }
        return true
    }

    /// The body is whole: the reader reads what waits, then the end.
    public func finish() { settle(.complete) }

    /// The body will never be whole: the reader's next read fails.
    public func fail() { settle(.failed) }

    private func settle(_ outcome: State.Outcome) {
        let wake = state.withLock { state -> (@Sendable () -> Void)? in
            if state.outcome == nil { state.outcome = outcome }
            defer { state.reader = nil }
            return state.reader
        }
        wake?()
    }

    // MARK: Reader

    /// Copies what waits into `buffer`. When nothing does, `wake` is kept and called once,
    /// from the writer's side, when more bytes, the end or a failure arrive.
    public func read(into buffer: UnsafeMutableRawBufferPointer, wake: @escaping @Sendable () -> Void) -> Read {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        let capacity = self.capacity
        let (read, writer) = state.withLock { state -> (Read, CheckedContinuation<Void, Never>?) in
            if state.outcome == .failed || state.closed { return (.failed, nil) }
            guard state.buffered > 0 else {
                if state.outcome == .complete { return (.end, nil) }
                state.reader = wake
                return (.wait, nil)
            }
            var copied = 0
            while copied < buffer.count, !state.batches.isEmpty {
                let batch = state.batches[0]
                let n = min(buffer.count - copied, batch.count - state.head)
                batch.withUnsafeBytes { source in
                    if let from = source.baseAddress { (base + copied).copyMemory(from: from + state.head, byteCount: n) }
                }
                copied += n
                state.head += n
                if state.head == batch.count {
                    state.batches.removeFirst()
                    state.head = 0
                }
            }
            state.buffered -= copied
            state.taken += Int64(copied)
            var writer: CheckedContinuation<Void, Never>?
            if state.buffered < capacity {
                writer = state.writer
                state.writer = nil
            }
            return (.bytes(copied), writer)
        }
        writer?.resume()
        return read
    }

    /// Bytes the reader has taken so far.
    public var taken: Int64 { state.withLock { $0.taken } }

    /// The reader is gone (or must not read on): what waits is dropped, a waiting writer
    /// goes on, later batches are dropped and reads fail. Idempotent.
    public func close() {
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.closed = true
            state.batches = []
            state.head = 0
            state.buffered = 0
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    /// Whether a writer waits for room (for tests).
    public var writerWaits: Bool { state.withLock { $0.writer != nil } }
}

extension BodyPipe: Equatable {
    public static func == (a: BodyPipe, b: BodyPipe) -> Bool { a === b }
}
