import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A response as the bytes arrived, with a strict verdict on its framing: did the body end the
/// way its head announced? `RawHTTP` forgives (it dechunks what it can); this does not, so a
/// test can tell a cleanly ended answer from an aborted one.
public struct RawFramedResponse: Sendable {
    public enum Framing: Sendable, Equatable {
        /// No complete head arrived (nothing at all, or the connection ended inside the head).
        case noHead
        /// The status or method says there is no body (1xx, 204, 304).
        case noBody
        /// `Content-Length: declared`, `received` body bytes arrived.
        case contentLength(declared: Int, received: Int)
        /// `Transfer-Encoding: chunked`; `terminated` when the last chunk and the trailer
        /// section's empty line arrived, `malformed` when a chunk line was not valid.
        case chunked(terminated: Bool, malformed: Bool)
        /// Neither: the body runs until the connection closes, so truncation cannot be seen.
        case closeDelimited
        /// The head itself could not be framed (two lengths, a length that is not a number…).
        case invalidHead(String)
    }

    /// Every byte received.
    public let raw: [UInt8]
    /// The head bytes (without the final CRLFCRLF), when a head arrived.
    public let head: [UInt8]?
    public let status: Int?
    public let headers: [(name: String, value: String)]
    /// The body: decoded when chunked, as received otherwise.
    public let body: [UInt8]
    public let framing: Framing
    /// The read ended by the receive timeout, not by the server.
    public let timedOut: Bool

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    }

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The answer arrived whole, exactly as its head announced.
    public var isComplete: Bool {
        switch framing {
        case .noBody: return true
        case .contentLength(let declared, let received): return declared == received
        case .chunked(let terminated, let malformed): return terminated && !malformed
        case .noHead, .closeDelimited, .invalidHead: return false
        }
    }

    /// Problems with the head's bytes: NUL, a CR not followed by LF, an LF not preceded by CR,
    /// an obs-fold continuation line, or a field line without a colon. Empty when clean.
    public var headViolations: [String] {
        guard let head else { return [] }
        var out: [String] = []
        if head.contains(0) { out.append("NUL in the head") }
        for i in head.indices {
            if head[i] == 13 && (i + 1 >= head.count || head[i + 1] != 10) { out.append("bare CR at \(i)") }
            if head[i] == 10 && (i == 0 || head[i - 1] != 13) { out.append("bare LF at \(i)") }
        }
        let lines = RawFramedResponse.split(head)
        for line in lines.dropFirst() {
            if let first = line.first, first == 32 || first == 9 { out.append("obs-fold line") }
            if !line.contains(58) { out.append("field line without a colon") }
        }
        return out
    }

    static func split(_ head: [UInt8]) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        var current: [UInt8] = []
        var i = 0
        while i < head.count {
            if head[i] == 13, i + 1 < head.count, head[i + 1] == 10 {
                lines.append(current)
                current = []
                i += 2
                continue
            }
            current.append(head[i])
            i += 1
        }
        lines.append(current)
        return lines
    }
}

extension RawHTTP {
    /// Sends `method target` (with `Host`, `Connection: close` and the headers given), reads
    /// until the server closes, the answer is complete by its own framing, or `timeout`
    /// seconds pass without the server closing, and judges the framing strictly.
    public static func framedRequest(
        port: Int, method: String = "GET", target: String, headers: [(String, String)] = [], timeout: Int = 15
    ) async throws -> RawFramedResponse {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        let bytes = Array(head.utf8)
        let isHead = method == "HEAD"
        return try await runOnOwnThread { try framedExchange(port: port, bytes: bytes, isHead: isHead, timeout: timeout) }
    }

    static func framedExchange(port: Int, bytes: [UInt8], isHead: Bool, timeout: Int) throws -> RawFramedResponse {
        let fd = try RawHTTP.connectLoopback(port: port, timeout: timeout)
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            offset += n
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var timedOut = false
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                timedOut = errno == EAGAIN || errno == EWOULDBLOCK
                break
            }
            if n == 0 { break }
            received.append(contentsOf: buffer[0..<n])
            // A server may keep the connection open after a complete answer.
            let judged = judge(received, isHead: isHead, timedOut: false)
            if judged.isComplete { return judged }
        }
        return judge(received, isHead: isHead, timedOut: timedOut)
    }

    /// Splits `data` into head and body and decides how the body was framed.
    public static func judge(_ data: [UInt8], isHead: Bool = false, timedOut: Bool = false) -> RawFramedResponse {
        // Skip interim (1xx) heads: the final answer follows them.
        var start = 0
        while true {
            guard let end = HostileUpstream.find([13, 10, 13, 10], in: data, from: start) else {
                return RawFramedResponse(raw: data, head: nil, status: nil, headers: [], body: [], framing: .noHead, timedOut: timedOut)
            }
            let head = Array(data[start..<end])
            let lines = RawFramedResponse.split(head)
            let statusLine = String(decoding: lines[0], as: UTF8.self)
            let parts = statusLine.split(separator: " ", omittingEmptySubsequences: true)
            let status = parts.count >= 2 ? Int(parts[1]) : nil
            var headers: [(name: String, value: String)] = []
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: 58) else { continue }
                headers.append(
                    (
                        String(decoding: line[..<colon], as: UTF8.self),
                        String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
                    ))
            }
            if let status, (100...199).contains(status), status != 101 {
                start = end + 4
                continue
            }
            let rest = Array(data[(end + 4)...])
            func make(_ body: [UInt8], _ framing: RawFramedResponse.Framing) -> RawFramedResponse {
                RawFramedResponse(raw: data, head: head, status: status, headers: headers, body: body, framing: framing, timedOut: timedOut)
            }
            guard let status else { return make(rest, .invalidHead("no status code")) }
            if isHead || status == 204 || status == 304 { return make([], .noBody) }
            let lengths = headers.filter { $0.name.lowercased() == "content-length" }.map(\.value)
            let chunked = headers.contains { $0.name.lowercased() == "transfer-encoding" && $0.value.lowercased().contains("chunked") }
            if chunked {
                if !lengths.isEmpty { return make(rest, .invalidHead("Content-Length with Transfer-Encoding")) }
                let (decoded, terminated, malformed) = strictDechunk(rest)
                return make(decoded, .chunked(terminated: terminated, malformed: malformed))
            }
            if !lengths.isEmpty {
                guard Set(lengths).count == 1, let declared = Int(lengths[0]), declared >= 0 else {
                    return make(rest, .invalidHead("Content-Length \(lengths)"))
                }
                return make(rest, .contentLength(declared: declared, received: rest.count))
            }
            return make(rest, .closeDelimited)
        }
    }

    /// RFC 9112 §7.1, strictly: hex size (extensions allowed), CRLF, data, CRLF … `0` CRLF,
    /// trailer fields, CRLF.
    static func strictDechunk(_ data: [UInt8]) -> (body: [UInt8], terminated: Bool, malformed: Bool) {
        var out: [UInt8] = []
        var i = 0
        while true {
            guard let lineEnd = HostileUpstream.find([13, 10], in: data, from: i) else { return (out, false, false) }
            let line = String(decoding: data[i..<lineEnd], as: UTF8.self)
            let sizeText = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            guard !sizeText.isEmpty, sizeText.allSatisfy(\.isHexDigit), sizeText.count <= 15, let size = Int(sizeText, radix: 16) else {
                return (out, false, true)
            }
            let start = lineEnd + 2
            if size == 0 {
                // Trailer fields until an empty line.
                var j = start
                while true {
                    guard let end = HostileUpstream.find([13, 10], in: data, from: j) else { return (out, false, false) }
                    if end == j { return (out, true, false) }
                    j = end + 2
                }
            }
            guard start + size + 2 <= data.count else {
                out.append(contentsOf: data[start..<min(start + size, data.count)])
                return (out, false, false)
            }
            guard data[start + size] == 13, data[start + size + 1] == 10 else { return (out, false, true) }
            out.append(contentsOf: data[start..<(start + size)])
            i = start + size + 2
        }
    }
}
