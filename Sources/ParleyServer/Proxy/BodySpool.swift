import ParleyEncoding
import Conversation
import Foundation
import NIOCore
import NIOPosix
import ParleyCrypto
import Synchronization

#if canImport(Glibc)
import Glibc
import ParleyDomain
#endif

/// A proxied request body made replayable: kept in memory up to a limit, then in a
/// spool file that has no name: it is created with `O_TMPFILE` (or unlinked the moment
/// it is created where the file system lacks that), so nothing is left on disk when
/// the process dies, and the disk space returns when the last descriptor closes.
/// File writes run on NIO's blocking thread pool, never on an event loop.
struct SpooledBody: Sendable {
    let body: RequestBody
    private let reservation: SpoolReservation?

    init(body: RequestBody, reservation: SpoolReservation?) {
        self.body = body
        self.reservation = reservation
    }

    /// Returns the spool's disk quota early; the file itself closes with the last
    /// reference to the body. Safe to call more than once.
    func remove() {
        reservation?.release()
    }

    /// A body read into memory: all of it when it ends within `memoryLimit` bytes, else the
    /// first buffers past that (the rest stays in `source`, for a `StreamingSpool`). `413`
    /// past `limit`.
    static func readStart<I: AsyncIteratorProtocol>(
        _ source: inout I, memoryLimit: Int, limit: Int64
    ) async throws -> [UInt8] where I.Element == ByteBuffer {
        var bytes: [UInt8] = []
        while bytes.count <= memoryLimit, let buffer = try await source.next() {
            guard Int64(bytes.count) + Int64(buffer.readableBytes) <= limit else {
                throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
            }
            bytes.append(contentsOf: buffer.readableBytesView)
        }
        return bytes
    }
}

/// A body too large for memory, spooled while the upstream exchange already reads it: the
/// exchange sends what has arrived and waits for the rest, so an upload streams through
/// instead of waiting to be whole; a replay (a challenge, a renewed token) reads the file
/// again from the start. A body of announced length reserves its length of the spool quota
/// at once; one without (chunked) grows its reservation as it arrives and goes upstream
/// chunked. `run()` fills the file and must run beside the exchange.
struct StreamingSpool: Sendable {
    let spooled: SpooledBody
    private let file: BodyFile
    private let spool: Spool
    private let reservation: SpoolReservation
    /// The announced length; nil for a body that has none.
    private let length: Int64?

    /// Reserves the quota (`length`, or what `first` holds) and creates the file. Throws
    /// `Problem` 413 when the quota is spent.
    static func start(length: Int64?, first: Int = 0, spool: Spool) async throws -> StreamingSpool {
        let reservation = SpoolReservation(spool: spool)
        try reservation.grow(length ?? Int64(first))
        do {
            let created = try await SpoolFile.create(in: spool.directory, filling: true)
            let body: RequestBody = length.map { .file(created.file, length: $0) } ?? .stream(created.file)
            return StreamingSpool(
                spooled: SpooledBody(body: body, reservation: reservation), file: created.file, spool: spool, reservation: reservation,
                length: length)
        } catch {
            reservation.release()
            throw error
        }
    }

    private init(spooled: SpooledBody, file: BodyFile, spool: Spool, reservation: SpoolReservation, length: Int64?) {
        self.spooled = spooled
        self.file = file
        self.spool = spool
        self.reservation = reservation
        self.length = length
    }

    /// Copies `first` (what was read before), then the rest of `source` into the file in
    /// batches, announcing each batch to the readers. A body that breaks off, runs past its
    /// announced length or past `limit` (`413`), fails the file (the exchange reading it
    /// aborts) and throws.
    func run<S: AsyncSequence>(_ source: S, limit: Int64 = .max) async throws where S.Element == ByteBuffer {
        try await run(source.makeAsyncIterator(), limit: limit)
    }

    func run<I: AsyncIteratorProtocol>(_ source: I, first: [UInt8] = [], limit: Int64 = .max) async throws where I.Element == ByteBuffer {
        var source = source
        var batches = SpoolBatches(SpoolFile(file: file), spool: spool, first: first)
        var arrival = BodyArrival(length: length, limit: limit, first: first.count)
        do {
            while let buffer = try await source.next() {
                try arrival.admit(buffer.readableBytes)
                if length == nil { try reservation.grow(Int64(buffer.readableBytes)) }
                try await batches.append(buffer.readableBytesView)
            }
            try arrival.whole()
            try await batches.finish()
            file.finish()
        } catch {
            await batches.abandon()
            file.fail()
            throw error
        }
    }
}

/// A body too large for memory, on its way upstream while it arrives: spooled for a replay
/// (`kept`), or piped through once.
enum StreamedBody: Sendable {
    case spooled(StreamingSpool)
    case piped(PipedBody)

    /// `413` when a kept body finds the spool's quota spent.
    static func start(length: Int64?, first: Int = 0, kept: Bool, spool: Spool) async throws -> StreamedBody {
        guard kept else { return .piped(PipedBody(length: length)) }
        return .spooled(try await StreamingSpool.start(length: length, first: first, spool: spool))
    }

    var spooled: SpooledBody {
        switch self {
        case .spooled(let streaming): streaming.spooled
        case .piped(let piped): piped.spooled
        }
    }

    func run<I: AsyncIteratorProtocol>(_ source: I, first: [UInt8], limit: Int64) async throws where I.Element == ByteBuffer {
        switch self {
        case .spooled(let streaming): try await streaming.run(source, first: first, limit: limit)
        case .piped(let piped): try await piped.run(source, first: first, limit: limit)
        }
    }

    /// The exchange has its outcome. A piped body stops waiting for a transfer that will
    /// read no more: one that failed (or never started), and one answered 300 or more
    /// before the body was sent (libcurl stops sending then). The rest of the client's body
    /// is read and dropped; a spool goes on filling for a replay.
    func exchanged(_ outcome: Result<ConversationResult, any Error>) {
        guard case .piped(let piped) = self else { return }
        switch outcome {
        case .success(.response(let response)) where response.status < 300: return
        default: piped.pipe.close()
        }
    }
}

/// A body too large for memory, for a conversation that cannot send it twice
/// (`ConversationManager.mayResend` is false): it passes through a `BodyPipe` to the
/// transfer while it arrives and is kept nowhere, so it takes no spool quota and no page
/// cache. `run()` feeds the pipe and must run beside the exchange.
struct PipedBody: Sendable {
    let pipe: BodyPipe
    /// The announced length; nil for a body that has none (it goes upstream chunked).
    private let length: Int64?

    init(length: Int64?) {
        self.pipe = BodyPipe(capacity: 4 * SpoolFile.batchBytes)
        self.length = length
    }

    var spooled: SpooledBody { SpooledBody(body: .pipe(pipe, length: length), reservation: nil) }

    /// Hands `first` (what was read before), then the rest of `source` to the pipe in
    /// batches, waiting while the transfer has a full pipe to send. A body that breaks off,
    /// runs past its announced length or past `limit` (`413`) fails the pipe (the exchange
    /// reading it aborts) and throws. Once the transfer is over (the pipe is closed), the
    /// rest of the body is read and dropped.
    func run<I: AsyncIteratorProtocol>(_ source: I, first: [UInt8] = [], limit: Int64 = .max) async throws where I.Element == ByteBuffer {
        var source = source
        var arrival = BodyArrival(length: length, limit: limit, first: first.count)
        var pending = first
        pending.reserveCapacity(SpoolFile.batchBytes)
        do {
            while let buffer = try await source.next() {
                try arrival.admit(buffer.readableBytes)
                pending.append(contentsOf: buffer.readableBytesView)
                if pending.count >= SpoolFile.batchBytes {
                    await pipe.write(pending)
                    pending = []
                    pending.reserveCapacity(SpoolFile.batchBytes)
                }
            }
            try arrival.whole()
            await pipe.write(pending)
            pipe.finish()
        } catch {
            pipe.fail()
            throw error
        }
    }
}

/// The checks a streamed body gets as it arrives: no longer than its announced length and
/// exactly that long at its end; without a length, at most `limit` bytes (`413`).
struct BodyArrival {
    let length: Int64?
    let limit: Int64
    private(set) var total: Int64

    init(length: Int64?, limit: Int64, first: Int) {
        self.length = length
        self.limit = limit
        self.total = Int64(first)
    }

    mutating func admit(_ count: Int) throws(Problem) {
        total += Int64(count)
        if let length {
            guard total <= length else { throw Problem.invalid("the request body is longer than its Content-Length") }
        } else {
            guard total <= limit else {
                throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
            }
        }
    }

    func whole() throws(Problem) {
        if let length, total != length { throw Problem.invalid("the request body is shorter than its Content-Length") }
    }
}

/// Bytes on their way into a spool file: gathered into batches of `SpoolFile.batchBytes`,
/// each written on the blocking pool while the next one gathers. The pool's thread
/// announces a written batch to the file's readers (`BodyFile.didWrite`) itself, so a batch
/// costs one hand-over to the pool and, only when the gathering task already waits for it,
/// one back: no `Task` and no hop through Swift's global executor.
struct SpoolBatches {
    let file: SpoolFile
    private let spool: Spool
    private var pending: [UInt8]
    private var writing: BatchWrite?

    init(_ file: SpoolFile, spool: Spool, first: [UInt8] = []) {
        self.file = file
        self.spool = spool
        self.pending = first
        pending.reserveCapacity(SpoolFile.batchBytes)
    }

    mutating func append(_ bytes: ByteBufferView) async throws {
        pending.append(contentsOf: bytes)
        if pending.count >= SpoolFile.batchBytes { try await flush() }
    }

    /// Writes what is left and waits until every batch is in the file.
    mutating func finish() async throws {
        if !pending.isEmpty { try await flush() }
        try await settle()
    }

    /// After a failure: waits for the write in flight, and writes nothing more.
    func abandon() async {
        if let writing { _ = try? await writing.wait() }
    }

    private mutating func flush() async throws {
        try await settle()
        let batch = pending
        let file = self.file
        let spool = self.spool
        pending = []
        pending.reserveCapacity(SpoolFile.batchBytes)
        let write = BatchWrite()
        file.write(batch) { result in
            if case .success(let took) = result {
                spool.didWrite(bytes: batch.count, took: took)
                file.file.didWrite(Int64(batch.count))
            }
            write.complete(result.map { _ in })
        }
        writing = write
    }

    private mutating func settle() async throws {
        guard let write = writing else { return }
        writing = nil
        try await write.wait()
    }
}

/// One batch's write on the blocking pool, as the gathering task sees it: `complete` is
/// called once from the pool's thread; `wait` returns at once when it has been, and
/// otherwise parks the task until it is.
final class BatchWrite: Sendable {
    private enum State {
        case writing
        case waiting(CheckedContinuation<Void, any Error>)
        case done(Result<Void, Problem>)
    }

    private let state = Mutex(State.writing)

    func complete(_ result: Result<Void, Problem>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            defer { state = .done(result) }
            if case .waiting(let continuation) = state { return continuation }
            return nil
        }
        waiter?.resume(with: result)
    }

    /// Whether a task is parked in `wait` (for tests).
    var hasWaiter: Bool {
        state.withLock { state in
            if case .waiting = state { return true }
            return false
        }
    }

    func wait() async throws {
        if let done = result() { return try done.get() }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            if let done = result(orPark: continuation) { continuation.resume(with: done) }
        }
    }

    /// The write's result once it is done; else nil, and `continuation` (if given) is parked.
    private func result(orPark continuation: CheckedContinuation<Void, any Error>? = nil) -> Result<Void, Problem>? {
        state.withLock { state in
            if case .done(let result) = state { return result }
            if let continuation { state = .waiting(continuation) }
            return nil
        }
    }
}

/// The spool directory and its disk quota, shared by every request of this instance.
final class Spool: Sendable {
    let directory: String
    let quotaBytes: Int64
    private let used = Atomic<Int64>(0)
    /// Since start: bytes written into spool files, and the seconds those writes took (what
    /// keeping bodies for a replay costs this machine's page cache and disk).
    private let writes = Mutex<(bytes: Int64, seconds: Double)>((0, 0))

    init(directory: String, quotaBytes: Int64) {
        self.directory = directory
        self.quotaBytes = quotaBytes
    }

    /// Bytes currently held by spool files.
    var usedBytes: Int64 { used.load(ordering: .relaxed) }

    func reserve(_ bytes: Int64) -> Bool {
        let after = used.wrappingAdd(bytes, ordering: .relaxed).newValue
        guard after <= quotaBytes else {
            used.wrappingSubtract(bytes, ordering: .relaxed)
            return false
        }
        return true
    }

    func unreserve(_ bytes: Int64) { used.wrappingSubtract(bytes, ordering: .relaxed) }

    /// Counts one write into a spool file: its size and how long it took.
    func didWrite(bytes: Int, took: Duration) {
        writes.withLock {
            $0.bytes &+= Int64(bytes)
            $0.seconds += took.timeInterval
        }
    }

    /// Bytes written into spool files since start.
    var bytesWritten: Int64 { writes.withLock { $0.bytes } }

    /// Seconds spent writing them.
    var writeSeconds: Double { writes.withLock { $0.seconds } }

    /// Deletes spool files an earlier process left behind (only possible where the file
    /// system has no `O_TMPFILE` and the process died between create and unlink).
    /// Runs once at start, off the event loops. Returns how many were removed.
    func sweep() -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var removed = 0
        for name in names where name.hasPrefix(SpoolFile.namePrefix) {
            if unlink(directory + (directory.hasSuffix("/") ? "" : "/") + name) == 0 { removed += 1 }
        }
        return removed
    }
}

/// One request's share of the spool quota; given back once.
final class SpoolReservation: Sendable {
    private let spool: Spool
    private let bytes = Mutex<Int64>(0)

    init(spool: Spool) { self.spool = spool }

    deinit { release() }

    func grow(_ delta: Int64) throws(Problem) {
        guard spool.reserve(delta) else {
            var problem = Problem(
                .contentTooLarge, .payloadTooLarge, "Parley's spool for large request bodies is full; try again later")
            problem.headers[.retryAfter] = "5"
            throw problem
        }
        bytes.withLock { $0 += delta }
    }

    func release() {
        let held = bytes.withLock { held -> Int64 in
            defer { held = 0 }
            return held
        }
        if held > 0 { spool.unreserve(held) }
    }
}

/// One spool file being written through its descriptor, which the `BodyFile` owns.
struct SpoolFile: Sendable {
    static let namePrefix = "parley-body-"
    /// Bytes gathered before one write to the file.
    static let batchBytes = 256 * 1024
    let file: BodyFile

    /// `filling`: readers may read the file while it is written (`StreamingSpool`).
    static func create(in directory: String, filling: Bool = false) async throws -> SpoolFile {
        let fd = try await NIOThreadPool.singleton.runIfActive { () -> Int32 in
            // O_TMPFILE (Linux): a file that never has a name.
            let nameless = open(directory, Int32(0o20_200_000) | O_RDWR | O_CLOEXEC, 0o600)
            if nameless >= 0 { return nameless }
            let path = directory + (directory.hasSuffix("/") ? "" : "/") + namePrefix + Hex.encode(SecureRandom.bytes(12))
            let fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
            if fd >= 0 { unlink(path) }
            return fd
        }
        guard fd >= 0 else { throw Problem(.internalServerError, .internalError, "cannot create a spool file for the request body") }
        // Closing a large nameless file frees its pages (tens of milliseconds per GiB): on the
        // pool, never on the event loop or the curl thread that drops the last reference.
        let closing: @Sendable (Int32) -> Void = { fd in NIOThreadPool.singleton.submit { _ in _ = close(fd) } }
        return SpoolFile(file: BodyFile(adopting: fd, filling: filling, closing: closing))
    }

    /// Writes `bytes` at the file's end on the blocking pool; `done` is called there, once,
    /// with how long the write took on the pool's thread.
    func write(_ bytes: [UInt8], then done: @escaping @Sendable (Result<Duration, Problem>) -> Void) {
        let file = self.file
        NIOThreadPool.singleton.submit { state in
            guard case .active = state else { return done(.failure(SpoolFile.writeFailed)) }
            let clock = ContinuousClock()
            let start = clock.now
            let ok = bytes.withUnsafeBytes { buffer -> Bool in
                guard let base = buffer.baseAddress else { return true }
                var offset = 0
                while offset < buffer.count {
                    let n = Glibc.write(file.descriptor, base + offset, buffer.count - offset)
                    if n < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    offset += n
                }
                return true
            }
            done(ok ? .success(clock.now - start) : .failure(SpoolFile.writeFailed))
        }
    }

    private static var writeFailed: Problem {
        Problem(.internalServerError, .internalError, "cannot write the request body spool file")
    }
}

