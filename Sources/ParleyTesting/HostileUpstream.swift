import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// One scripted reply of a hostile upstream: raw bytes, then what happens to the connection.
public struct HostileReply: Sendable {
    public enum Ending: Sendable {
        /// Everything written, then the connection is closed (FIN).
        case close
        /// Everything written, then the write side is shut down; the connection stays
        /// open for reading until the peer closes it.
        case halfClose
        /// Everything written, then nothing more: the connection stays open, silent, until
        /// the peer closes it (or the server stops).
        case stall
        /// Everything written, then `pattern` again and again, one copy every `interval`,
        /// until the peer closes the connection (or the server stops).
        case trickle(pattern: [UInt8], interval: Duration)
    }

    public var bytes: [UInt8]
    public var ending: Ending

    public init(bytes: [UInt8], ending: Ending = .close) {
        self.bytes = bytes
        self.ending = ending
    }

    /// Raw text, sent byte for byte (write `\r\n` yourself).
    public static func raw(_ text: String, ending: Ending = .close) -> HostileReply {
        HostileReply(bytes: Array(text.utf8), ending: ending)
    }

    /// A well-formed HTTP/1.1 answer with `Content-Length` and `Connection: close`.
    public static func response(
        status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], body: [UInt8] = []
    ) -> HostileReply {
        var head = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return HostileReply(bytes: Array(head.utf8) + body, ending: .close)
    }

    public static func response(status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], body: String) -> HostileReply {
        response(status: status, reason: reason, headers: headers, body: Array(body.utf8))
    }

    /// A JSON answer (`Content-Type: application/json`).
    public static func json(status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], _ body: String) -> HostileReply {
        response(status: status, reason: reason, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8))
    }
}

/// What a case answers. The n-th request (0-based) to the case gets `replies[min(n, count - 1)]`,
/// so a case can answer well first and badly afterwards. A request without an `Authorization`
/// header gets `withoutAuthorization` instead when it is set (and does not advance the count).
public struct HostileAnswer: Sendable {
    public var replies: [HostileReply]
    public var withoutAuthorization: HostileReply?
    /// The reply goes out as soon as the request head is in, written whole (a blocking write,
    /// as a thread-per-connection server does) before the body is read: a full-duplex server
    /// that reads on only once its answer has been taken. The request is recorded without a body.
    public var answersBeforeBody = false

    public init(replies: [HostileReply], withoutAuthorization: HostileReply? = nil) {
        self.replies = replies.isEmpty ? [HostileReply(bytes: [], ending: .close)] : replies
        self.withoutAuthorization = withoutAuthorization
    }

    public init(_ reply: HostileReply) { self.init(replies: [reply]) }

    public static func raw(_ text: String, ending: HostileReply.Ending = .close) -> HostileAnswer {
        HostileAnswer(.raw(text, ending: ending))
    }

    public static func bytes(_ bytes: [UInt8], ending: HostileReply.Ending = .close) -> HostileAnswer {
        HostileAnswer(HostileReply(bytes: bytes, ending: ending))
    }

    public static func sequence(_ replies: [HostileReply]) -> HostileAnswer { HostileAnswer(replies: replies) }
}

/// A request the hostile upstream received (head parsed leniently, body as read).
public struct HostileRequest: Sendable {
    public let method: String
    public let target: String
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// `application/x-www-form-urlencoded` body fields (for token requests).
    public var formFields: [String: String] {
        var out: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
            }
            out[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return out
    }
}

/// A raw TCP server on 127.0.0.1 that answers `/case/<name>[/…]` with scripted bytes, however
/// malformed: broken status lines, conflicting framing, truncated bodies, header floods,
/// forbidden bytes, hostile cookies and token responses. One thread accepts, one thread per
/// connection reads the request head (and a `Content-Length` body), writes the case's reply
/// and then closes, half-closes, stalls or trickles. It never answers anything but the script,
/// never crashes on what a client sends, and ignores `SIGPIPE` per write (`MSG_NOSIGNAL`).
/// An unknown case gets a plain `404`.
///
/// ```swift
/// let server = try HostileUpstream(cases: ["bad-status": .raw("HTTP/1.1 99 Nope\r\n\r\n")])
/// defer { server.stop() }
/// ```
public final class HostileUpstream: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let port: Int
    /// The prefix every case lives under.
    public static let prefix = "/case/"

    private let cases: [String: HostileAnswer]
    private let listener: Int32
    /// Written to (and never read) when the server stops: every poll sees it readable.
    private let wake: (read: Int32, write: Int32)
    private let state = Mutex(State())

    private struct State {
        var stopped = false
        var counts: [String: Int] = [:]
        var requests: [String: [HostileRequest]] = [:]
        var connections: Set<Int32> = []
        var active = 0
    }

    /// Longest a connection thread lives (stalls and trickles end on their own by then).
    static let connectionLifetime: Duration = .seconds(120)
    /// Largest request head read; a longer one is dropped.
    static let maxRequestHead = 1 << 20
    /// Largest request body read.
    static let maxRequestBody = 16 << 20

    public init(cases: [String: HostileAnswer]) throws {
        self.cases = cases
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw Failure(description: "pipe() failed") }
        wake = (pipeFDs[0], pipeFDs[1])

        do {
            (listener, port) = try LoopbackSocket.bindLoopback(backlog: 128, reuseAddress: true)
        } catch {
            close(pipeFDs[0])
            close(pipeFDs[1])
            throw Failure(description: "cannot listen on 127.0.0.1")
        }

        let thread = Thread { [self] in acceptLoop() }
        thread.name = "hostile-upstream-accept"
        thread.start()
    }

    deinit { stop() }

    /// The base URL of case `name` (`http://127.0.0.1:<port>/case/<name>`).
    public func url(_ name: String) -> String { "http://127.0.0.1:\(port)\(Self.prefix)\(name)" }

    /// How many requests case `name` answered from its reply list (not counting
    /// `withoutAuthorization` answers).
    public func count(_ name: String) -> Int { state.withLock { $0.counts[name] ?? 0 } }

    /// Every request that reached case `name`, in order (unauthorised ones included).
    public func requests(_ name: String) -> [HostileRequest] { state.withLock { $0.requests[name] ?? [] } }

    /// Connections being served right now.
    public var activeConnections: Int { state.withLock { $0.active } }

    /// Stops accepting, wakes every connection thread and shuts their sockets down. Idempotent.
    public func stop() {
        let open = state.withLock { state -> Set<Int32>? in
            if state.stopped { return nil }
            state.stopped = true
            return state.connections
        }
        guard let open else { return }
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        // The listener and the pipe are closed by the accept thread when it leaves.
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    // MARK: accepting

    private func acceptLoop() {
        defer {
            close(listener)
            // The wake pipe stays readable for connection threads still polling it; it is
            // closed by the last of them (or here when none are left).
            closeWakeIfIdle()
        }
        while !isStopped {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let client = accept(listener, nil, nil)
            if client < 0 { continue }
            let admitted = state.withLock { state -> Bool in
                if state.stopped { return false }
                state.connections.insert(client)
                state.active += 1
                return true
            }
            guard admitted else {
                close(client)
                return
            }
            let thread = Thread { [self] in
                serve(client)
                finishConnection(client)
            }
            thread.name = "hostile-upstream-connection"
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    private let wakeClosed = Mutex(false)

    private func finishConnection(_ fd: Int32) {
        state.withLock { state in
            state.connections.remove(fd)
            state.active -= 1
        }
        close(fd)
        closeWakeIfIdle()
    }

    private func closeWakeIfIdle() {
        let idle = state.withLock { $0.stopped && $0.active == 0 }
        guard idle else { return }
        wakeClosed.withLock { closed in
            if closed { return }
            closed = true
            close(wake.read)
            close(wake.write)
        }
    }

    // MARK: one connection

    private enum Readiness {
        case readable
        case timeout
        case stop
    }

    /// Waits for `fd` to become readable, the server to stop, or `milliseconds` to pass.
    private func waitReadable(_ fd: Int32, milliseconds: Int32) -> Readiness {
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        while true {
            let ready = poll(&fds, 2, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                return .stop
            }
            if ready == 0 { return .timeout }
            if fds[1].revents != 0 { return .stop }
            return .readable
        }
    }

    private func serve(_ fd: Int32) {
        let deadline = ContinuousClock.now + Self.connectionLifetime
        func remainingMilliseconds() -> Int32 {
            let left = deadline - ContinuousClock.now
            let ms = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
            return Int32(clamping: max(0, ms))
        }
        // Writes never block for ever: a peer that stopped reading fails the write after a while.
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        var buffer = [UInt8](repeating: 0, count: 65536)
        var received: [UInt8] = []
        // The request head.
        var headEnd: Int?
        while headEnd == nil {
            guard case .readable = waitReadable(fd, milliseconds: remainingMilliseconds()) else { return }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { return }
            let searchFrom = max(0, received.count - 3)
            received.append(contentsOf: buffer[0..<n])
            headEnd = Self.find([13, 10, 13, 10], in: received, from: searchFrom)
            if headEnd == nil && received.count > Self.maxRequestHead { return }
        }
        guard let headEnd else { return }
        let head = String(decoding: received[0..<headEnd], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let requestLine = lines[0].split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        let method = requestLine.first ?? ""
        let target = requestLine.count > 1 ? requestLine[1] : ""
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]).trimmingCharacters(in: .whitespaces), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name }?.value }

        // Expect: 100-continue (curl asks for it before large bodies).
        if header("expect")?.lowercased() == "100-continue" {
            guard sendAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return }
        }
        if answersBeforeBody(target) {
            let reply = choose(HostileRequest(method: method, target: target, headers: headers, body: []), authorized: header("authorization") != nil)
            guard sendAll(fd, reply.bytes) else { return }
            if let declared = header("content-length").flatMap({ Int($0) }) {
                var left = declared - (received.count - headEnd - 4)
                while left > 0 {
                    guard case .readable = waitReadable(fd, milliseconds: remainingMilliseconds()) else { return }
                    let n = read(fd, &buffer, min(buffer.count, left))
                    if n <= 0 { return }
                    left -= n
                }
            }
            shutdown(fd, Int32(SHUT_WR))
            return
        }
        // A Content-Length body.
        var body = Array(received[(headEnd + 4)...])
        if let declared = header("content-length").flatMap({ Int($0) }), declared > 0 {
            let wanted = min(declared, Self.maxRequestBody)
            while body.count < wanted {
                guard case .readable = waitReadable(fd, milliseconds: remainingMilliseconds()) else { return }
                let n = read(fd, &buffer, min(buffer.count, wanted - body.count))
                if n <= 0 { return }
                body.append(contentsOf: buffer[0..<n])
            }
        }

        let request = HostileRequest(method: method, target: target, headers: headers, body: body)
        let reply = choose(request, authorized: header("authorization") != nil)
        guard sendAll(fd, reply.bytes) else { return }

        switch reply.ending {
        case .close:
            shutdown(fd, Int32(SHUT_WR))
        case .halfClose:
            shutdown(fd, Int32(SHUT_WR))
            drainUntilPeerCloses(fd, milliseconds: remainingMilliseconds)
        case .stall:
            drainUntilPeerCloses(fd, milliseconds: remainingMilliseconds)
        case .trickle(let pattern, let interval):
            let step = Int32(clamping: max(1, interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000))
            while remainingMilliseconds() > 0 {
                switch waitReadable(fd, milliseconds: min(step, remainingMilliseconds())) {
                case .stop: return
                case .readable:
                    let n = read(fd, &buffer, buffer.count)
                    if n <= 0 { return }  // the peer gave up
                case .timeout:
                    guard sendAll(fd, pattern) else { return }
                }
            }
        }
    }

    /// Reads and discards until the peer closes, the server stops or the connection's time is up.
    private func drainUntilPeerCloses(_ fd: Int32, milliseconds: () -> Int32) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while milliseconds() > 0 {
            guard case .readable = waitReadable(fd, milliseconds: milliseconds()) else { return }
            if read(fd, &buffer, buffer.count) <= 0 { return }
        }
    }

    /// The case a target names, if any.
    private func caseName(_ target: String) -> String? {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard path.hasPrefix(Self.prefix) else { return nil }
        return String(path.dropFirst(Self.prefix.count).prefix { $0 != "/" })
    }

    private func answersBeforeBody(_ target: String) -> Bool {
        caseName(target).flatMap { cases[$0] }?.answersBeforeBody ?? false
    }

    private func choose(_ request: HostileRequest, authorized: Bool) -> HostileReply {
        guard let name = caseName(request.target), let answer = cases[name] else { return Self.notFound }
        return state.withLock { state -> HostileReply in
            state.requests[name, default: []].append(request)
            if !authorized, let unauthorized = answer.withoutAuthorization { return unauthorized }
            let n = state.counts[name, default: 0]
            state.counts[name] = n + 1
            return answer.replies[min(n, answer.replies.count - 1)]
        }
    }

    private static let notFound = HostileReply.response(status: 404, reason: "Not Found", body: "no such case")

    private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int = 0) -> Int? {
        guard haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var i = start
        while i <= haystack.count - needle.count {
            if haystack[i] == needle[0] {
                var match = true
                for j in 1..<needle.count where haystack[i + j] != needle[j] {
                    match = false
                    break
                }
                if match { return i }
            }
            i += 1
        }
        return nil
    }
}
