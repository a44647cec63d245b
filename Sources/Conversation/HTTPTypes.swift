#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif
import Synchronization

/// HTTP values the conversation engine works with. They carry no I/O: a
/// `Transport` turns an `UpstreamRequest` into an `UpstreamResponse`.

/// Ordered header fields with case-insensitive names. Values never contain CR or LF:
/// `append` and `set` refuse them, so a header cannot smuggle another one.
public struct HeaderFields: Sendable, Sequence, Equatable, ExpressibleByDictionaryLiteral {
    public struct Field: Sendable, Equatable {
        public let name: String
        public let value: String
    }

    private var fields: [Field] = []

    /// How many fields there are (what a copy reserves room for).
    public var underestimatedCount: Int { fields.count }

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { append(name, value) }
    }

    public init(_ pairs: [(String, String)]) {
        for (name, value) in pairs { append(name, value) }
    }

    public static func isSafe(name: String, value: String) -> Bool {
        guard !name.isEmpty else { return false }
        for u in name.utf8 where u <= 0x20 || u >= 0x7F || u == UInt8(ascii: ":") { return false }
        for u in value.utf8 where u == 0x0D || u == 0x0A || u == 0x00 { return false }
        return true
    }

    /// Appends a field; unsafe names or values (CR, LF, NUL) are dropped.
    public mutating func append(_ name: String, _ value: String) {
        guard Self.isSafe(name: name, value: value) else { return }
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field with this name by one field.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        append(name, value)
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { Self.same($0.name, name) }
    }

    public mutating func removeAll(where predicate: (Field) -> Bool) {
        fields.removeAll(where: predicate)
    }

    public subscript(_ name: String) -> String? {
        fields.first { Self.same($0.name, name) }?.value
    }

    public func values(_ name: String) -> [String] {
        fields.filter { Self.same($0.name, name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
    }
}

/// A request body that can be sent more than once: a restart (challenge, refresh,
/// CSRF retry) replays it from memory or from its spool file.
public enum RequestBody: Sendable, Equatable {
    case empty
    case bytes([UInt8])
    /// An open file (a spool file, nameless once created); `length` is its size in bytes.
    case file(BodyFile, length: Int64)
    /// A spool file still being filled from a body whose length nobody announced: its size
    /// is known only once its writer finishes, so it goes upstream with chunked coding.
    case stream(BodyFile)
    /// A body that passes through once and is kept nowhere, for a conversation that cannot
    /// send its request twice; `length` nil sends it with chunked coding.
    case pipe(BodyPipe, length: Int64?)

    /// Opens the file at `path` for reading; when it cannot be opened, sending fails
    /// with `invalidRequest`.
    public static func file(path: String, length: Int64) -> RequestBody {
        .file(BodyFile(adopting: open(path, O_RDONLY | O_CLOEXEC)), length: length)
    }

    /// The size in bytes; nil for a `stream` (or a `pipe` without one), whose size is not known yet.
    public var length: Int64? {
        switch self {
        case .empty: 0
        case .bytes(let b): Int64(b.count)
        case .file(_, let length): length
        case .stream: nil
        case .pipe(_, let length): length
        }
    }
}

/// An open file descriptor holding a request body. Readers use positional reads
/// (`pread`), so a replay or a second transfer never shares an offset with another.
/// The descriptor has this one owner and is closed once, when the last reference goes:
/// by `closing` where one is given (a large nameless file's close frees its pages, which
/// takes milliseconds per hundred MiB and must not run on an event loop or the curl
/// thread), else at once.
///
/// A file made with `filling:` is still being written (a spooled upload streamed on while
/// it arrives): readers read what is written so far and wait for the rest (`readable`),
/// and the writer reports its progress (`didWrite`, `finish`, `fail`).
public final class BodyFile: Sendable, Equatable {
    /// -1 when the file could not be opened.
    public let descriptor: Int32
    /// False for a file that is whole from the start (its `filling` is never used).
    private let grows: Bool
    private let filling = Mutex(Filling())
    private let closing: (@Sendable (Int32) -> Void)?

    private struct Filling {
        var written: Int64 = 0
        var outcome: Outcome?
        /// Readers waiting for bytes beyond `written`, each called once.
        var waiters: [@Sendable () -> Void] = []

        enum Outcome { case complete, failed }
    }

    /// How much a reader may read now from a given offset.
    public enum Readable: Sendable, Equatable {
        /// Everything up to the end of the file (it is whole).
        case toEnd
        /// Bytes up to this offset (exclusive) are written; more may follow.
        case upTo(Int64)
        /// Nothing beyond the offset yet: the `wake` given is called once there is.
        case wait
        /// The writer gave up (the client's body broke off): the body will never be whole.
        case failed
    }

    public init(adopting descriptor: Int32) {
        self.descriptor = descriptor
        self.grows = false
        self.closing = nil
    }

    /// A file its writer is still filling (`filling`); readers wait for bytes not written
    /// yet. `closing` is given the descriptor, once, to close when the last reference goes.
    public init(adopting descriptor: Int32, filling: Bool, closing: (@Sendable (Int32) -> Void)? = nil) {
        self.descriptor = descriptor
        self.grows = filling
        self.closing = closing
    }

    deinit {
        guard descriptor >= 0 else { return }
        if let closing { closing(descriptor) } else { _ = close(descriptor) }
    }

    /// For readers: what can be read from `offset` now. When nothing can, `wake` is kept and
    /// called once (from the writer's task) when more bytes, the end or a failure arrive.
    public func readable(from offset: Int64, wake: @escaping @Sendable () -> Void) -> Readable {
        guard grows else { return .toEnd }
        return filling.withLock { state -> Readable in
            switch state.outcome {
            case .complete?: return .toEnd
            case .failed?: return .failed
            case nil:
                if state.written > offset { return .upTo(state.written) }
                state.waiters.append(wake)
                return .wait
            }
        }
    }

    /// Readers parked by `readable` and not woken yet.
    public var waitingReaders: Int { grows ? filling.withLock { $0.waiters.count } : 0 }

    /// For the writer: `count` more bytes are in the file.
    public func didWrite(_ count: Int64) {
        settle { $0.written += count }
    }

    /// For the writer: the file is whole.
    public func finish() {
        settle { if $0.outcome == nil { $0.outcome = .complete } }
    }

    /// For the writer: the file will never be whole; readers abort.
    public func fail() {
        settle { if $0.outcome == nil { $0.outcome = .failed } }
    }

    private func settle(_ change: (inout Filling) -> Void) {
        guard grows else { return }
        let waiters = filling.withLock { state -> [@Sendable () -> Void] in
            change(&state)
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for wake in waiters { wake() }
    }

    public static func == (a: BodyFile, b: BodyFile) -> Bool { a === b }
}

/// TLS material for one upstream call. Verification of the server is always on.
public struct TLSOptions: Sendable, Equatable {
    /// PKCS#12 bundle presented when the server asks for a client certificate.
    public var clientPKCS12: [UInt8]?
    public var clientPKCS12Password: String?
    /// The same identity as PEM (certificate then chain, and an unencrypted key): what
    /// Parley stores, so that no connection pays for PKCS#12 key derivation.
    public var clientCertificatePEM: [UInt8]?
    public var clientKeyPEM: [UInt8]?
    /// Extra trust anchors (PEM) in addition to the system store.
    public var caPEM: [UInt8]?

    public init(clientPKCS12: [UInt8]? = nil, clientPKCS12Password: String? = nil, caPEM: [UInt8]? = nil) {
        self.clientPKCS12 = clientPKCS12
        self.clientPKCS12Password = clientPKCS12Password
        self.caPEM = caPEM
    }
}

/// Time limits for one upstream call.
public struct Timeouts: Sendable, Equatable {
    public var connect: Duration
    /// The whole exchange, headers and body; nil for none (large streams).
    public var total: Duration?
    /// No byte moved in either direction for this long ends the call.
    public var idle: Duration

    public init(connect: Duration = .seconds(5), total: Duration? = nil, idle: Duration = .seconds(30)) {
        self.connect = connect
        self.total = total
        self.idle = idle
    }
}

public struct UpstreamRequest: Sendable {
    public var method: String
    /// Absolute http(s) URL, already checked against the destination by the caller.
    public var url: String
    public var headers: HeaderFields
    public var body: RequestBody
    public var tls: TLSOptions
    public var timeouts: Timeouts

    public init(
        method: String, url: String, headers: HeaderFields = [:], body: RequestBody = .empty,
        tls: TLSOptions = TLSOptions(), timeouts: Timeouts = Timeouts()
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.tls = tls
        self.timeouts = timeouts
    }
}

/// Where a response body's bytes come from. Implementations apply back-pressure:
/// `next()` suspends until bytes are there, and a source never buffers without bound.
public protocol ResponseBodySource: AnyObject, Sendable {
    /// The next chunk, or nil at the end. Throws `TransportError` on failure.
    func next() async throws -> [UInt8]?
    /// The reader is gone: stop the transfer and free what it holds. Idempotent.
    func cancel()
}

/// A response body, read once, as a stream of byte chunks.
public struct ResponseBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let source: any ResponseBodySource

    public init(source: any ResponseBodySource) { self.source = source }

    public static var empty: ResponseBody { .bytes([]) }

    public static func bytes(_ bytes: [UInt8]) -> ResponseBody {
        ResponseBody(source: BytesBodySource(bytes))
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: any ResponseBodySource
        public mutating func next() async throws -> [UInt8]? { try await source.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: source) }

    /// Reads the whole body, refusing more than `limit` bytes.
    public func collect(upTo limit: Int) async throws -> [UInt8] {
        var out: [UInt8] = []
        while let chunk = try await source.next() {
            guard out.count + chunk.count <= limit else {
                source.cancel()
                throw TransportError(.bodyTooLarge, detail: "response body over \(limit) bytes")
            }
            if out.isEmpty { out = chunk } else { out.append(contentsOf: chunk) }
        }
        return out
    }

    /// The body will not be read: stop its transfer.
    public func discard() { source.cancel() }
}

final class BytesBodySource: ResponseBodySource, @unchecked Sendable {
    // Only touched by the single reader of the body, as ResponseBody promises.
    private var bytes: [UInt8]?
    init(_ bytes: [UInt8]) { self.bytes = bytes.isEmpty ? nil : bytes }
    func next() async throws -> [UInt8]? {
        defer { bytes = nil }
        return bytes
    }
    func cancel() {}
}

public struct UpstreamResponse: Sendable {
    public var status: Int
    public var headers: HeaderFields
    public var body: ResponseBody

    public init(status: Int, headers: HeaderFields = [:], body: ResponseBody = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why an upstream call failed. `description` names the kind and host, never a
/// header, body or credential.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// Could not connect, TLS failed, connection reset: `502 upstream_unavailable`.
        case unavailable
        /// Connect, idle or total time limit reached: `504 upstream_timeout`.
        case timeout
        /// The caller went away.
        case cancelled
        /// The request could not be expressed (bad URL, bad client certificate).
        case invalidRequest
        /// A body was larger than the reader allows.
        case bodyTooLarge
        /// The peer answered something that is not a usable HTTP response (bad status
        /// line, broken framing, oversized head): `502`, and never retried as transient.
        case invalidResponse
    }

    public let code: Code
    /// Safe for logs and problem details: no secrets.
    public let detail: String
    /// Whether any byte of the request may have reached the peer. False only when the transport
    /// knows it did not (no connection, nothing written): such a request may be sent again even
    /// where sending twice is harmful (a rotating refresh token). Unknown counts as true.
    public let mayHaveReachedPeer: Bool

    public init(_ code: Code, detail: String, mayHaveReachedPeer: Bool = true) {
        self.code = code
        self.detail = detail
        self.mayHaveReachedPeer = mayHaveReachedPeer
    }

    public var description: String { "TransportError(\(code)): \(detail)" }
}

/// Sends one HTTP exchange. Implementations return as soon as the response head
/// is known; the body streams afterwards. They never follow redirects.
public protocol Transport: Sendable {
    func send(_ request: UpstreamRequest) async throws -> UpstreamResponse
}

/// Printed, TLS options say what they hold, never a key or certificate's bytes.
extension TLSOptions: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "TLSOptions(clientIdentity: \(clientPKCS12 != nil || clientKeyPEM != nil), extraTrustAnchors: \(caPEM != nil))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description], displayStyle: .struct) }
}
