import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Slowloris and friends against the real server object: a head that trickles, a body
/// that stalls and an idle keep-alive connection are closed by Parley on its own clock.
@Suite(.serialized) struct SlowPeerTests {
    static func tight(_ configuration: inout ParleyConfiguration) {
        configuration.timeouts.requestHead = .seconds(1)
        configuration.timeouts.requestBodyIdle = .seconds(1)
    }

    @Test func aTrickledHeadIsCutOff() async throws {
        try await withLiveParley(adjust: Self.tight) { live in
            let closedAfter = try await runOnOwnThread {
                try SlowClient.closeTime(port: live.port, first: "GET /healthz HTTP/1.1\r\nHost: parley\r\n", trickle: "X-Slow: 1\r\n", limit: 8)
            }
            // One byte-line every 200 ms never completes the head; the 1 s deadline is not reset by it.
            #expect(closedAfter != nil && closedAfter! < 4, "\(String(describing: closedAfter))")
        }
    }

    @Test func aStalledBodyIsCutOff() async throws {
        try await withLiveParley(adjust: Self.tight) { live in
            let head = "POST /v1/registrations HTTP/1.1\r\nHost: parley\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"dest"
            let closedAfter = try await runOnOwnThread { try SlowClient.closeTime(port: live.port, first: head, trickle: nil, limit: 8) }
            #expect(closedAfter != nil && closedAfter! < 4, "\(String(describing: closedAfter))")
        }
    }

    @Test func anIdleKeepAliveConnectionIsClosedAfterItsAnswer() async throws {
        try await withLiveParley(adjust: Self.tight) { live in
            let (answered, closedAfter) = try await runOnOwnThread { () -> (Bool, Double?) in
                let socket = try SlowClient.connect(port: live.port)
                defer { close(socket) }
                try SlowClient.send(socket, "GET /healthz HTTP/1.1\r\nHost: parley\r\n\r\n")
                let answer = SlowClient.readSome(socket)
                return (answer.hasPrefix("HTTP/1.1 200"), SlowClient.waitForClose(socket, limit: 8))
            }
            #expect(answered)
            #expect(closedAfter != nil && closedAfter! < 4, "\(String(describing: closedAfter))")
        }
    }
}

/// `PARLEY_MAX_CONNECTIONS` and `PARLEY_IDLE_TIMEOUT_SECONDS`: with N connections held open,
/// the next one is not served until one of them closes; a connection that sends nothing is
/// closed after the idle timeout (the request-head timeout set far beyond it).
@Suite(.serialized) struct ConnectionLimitTests {
    @Test func theConnectionPastTheCapWaitsUntilOneCloses() async throws {
        try await withLiveParley(adjust: { $0.connections.maxConnections = 2 }) { live in
            let (held, waited, servedAfterClose) = try await runOnOwnThread { () -> (Bool, String, String) in
                // Two connections, each answered once and kept open: the cap is reached.
                var open: [Int32] = []
                defer { open.forEach { close($0) } }
                var held = true
                for _ in 0..<2 {
                    let socket = try SlowClient.connect(port: live.port)
                    open.append(socket)
                    try SlowClient.send(socket, "GET /healthz HTTP/1.1\r\nHost: parley\r\n\r\n")
                    held = held && SlowClient.readSome(socket).hasPrefix("HTTP/1.1 200")
                }
                // The third is accepted by the kernel's backlog, not by Parley: no answer.
                let third = try SlowClient.connect(port: live.port)
                defer { close(third) }
                try SlowClient.send(third, "GET /healthz HTTP/1.1\r\nHost: parley\r\n\r\n")
                let waited = SlowClient.readSome(third, timeoutMilliseconds: 1500)
                // One of the two goes: the third is served.
                close(open.removeFirst())
                return (held, waited, SlowClient.readSome(third))
            }
            #expect(held)
            #expect(waited == "", "the connection past the cap was served: \(waited.prefix(80))")
            #expect(servedAfterClose.hasPrefix("HTTP/1.1 200"), "\(servedAfterClose.prefix(80))")
        }
    }

    @Test func anIdleConnectionIsClosedAfterTheIdleTimeout() async throws {
        try await withLiveParley(adjust: {
            $0.connections.idleTimeout = .seconds(1)
            $0.timeouts.requestHead = .seconds(3600)
        }) { live in
            let (answered, closedAfter) = try await runOnOwnThread { () -> (Bool, Double?) in
                let socket = try SlowClient.connect(port: live.port)
                defer { close(socket) }
                try SlowClient.send(socket, "GET /healthz HTTP/1.1\r\nHost: parley\r\n\r\n")
                let answer = SlowClient.readSome(socket)
                return (answer.hasPrefix("HTTP/1.1 200"), SlowClient.waitForClose(socket, limit: 10))
            }
            #expect(answered)
            #expect(closedAfter != nil && closedAfter! < 5, "\(String(describing: closedAfter))")
        }
    }
}

/// `Expect: 100-continue` (curl sends it before bodies over 1 MiB and then holds the body
/// back for a second): Parley answers `100 Continue` on the head alone, then the final answer.
@Suite struct ExpectContinueTests {
    @Test func aClientThatWaitsForContinueHearsItBeforeSendingItsBody() async throws {
        try await withLiveParley { live in
            let body = #"{"destination":"sim"}"#
            let (interim, final, unasked) = try await runOnOwnThread { () -> (String, String, String) in
                let socket = try SlowClient.connect(port: live.port)
                defer { close(socket) }
                try SlowClient.send(
                    socket,
                    "POST /v1/registrations HTTP/1.1\r\nHost: parley\r\nContent-Type: application/json\r\n"
                        + "Content-Length: \(body.utf8.count)\r\nExpect: 100-continue\r\n\r\n")
                let interim = SlowClient.readSome(socket)  // nothing of the body has been sent yet
                try SlowClient.send(socket, body)
                let final = SlowClient.readSome(socket)
                // The same request without the expectation gets no interim answer.
                try SlowClient.send(
                    socket,
                    "POST /v1/registrations HTTP/1.1\r\nHost: parley\r\nContent-Type: application/json\r\n"
                        + "Content-Length: \(body.utf8.count)\r\n\r\n" + body)
                return (interim, final, SlowClient.readSome(socket))
            }
            #expect(interim == "HTTP/1.1 100 Continue\r\n\r\n", "\(interim)")
            #expect(final.hasPrefix("HTTP/1.1 201"), "\(final.prefix(200))")
            #expect(unasked.hasPrefix("HTTP/1.1 201"), "\(unasked.prefix(200))")
        }
    }
}

/// A blocking client on its own thread that speaks as slowly as a test wants.
enum SlowClient {
    static func connect(port: Int) throws -> Int32 { try RawHTTP.connectLoopback(port: port) }

    static func send(_ fd: Int32, _ text: String) throws {
        let bytes = Array(text.utf8)
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw TestHarnessError("send failed") }
    }

    static func readSome(_ fd: Int32, timeoutMilliseconds: Int32 = 5000) -> String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, timeoutMilliseconds) > 0 else { return "" }
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? String(decoding: buffer.prefix(n), as: UTF8.self) : ""
    }

    /// Seconds until the server closed the connection (read returned 0 or failed), or nil
    /// when it was still open after `limit` seconds. Drains whatever the server sends.
    static func waitForClose(_ fd: Int32, limit: Double, trickle: String? = nil) -> Double? {
        let start = Date()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date().timeIntervalSince(start) < limit {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 200) > 0 {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return Date().timeIntervalSince(start) }
                continue
            }
            if let trickle {
                let bytes = Array(trickle.utf8)
                let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent < 0 { return Date().timeIntervalSince(start) }
            }
        }
        return nil
    }

    static func closeTime(port: Int, first: String, trickle: String?, limit: Double) throws -> Double? {
        let fd = try connect(port: port)
        defer { close(fd) }
        try send(fd, first)
        return waitForClose(fd, limit: limit, trickle: trickle)
    }
}
