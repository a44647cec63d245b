import Foundation
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// A parsed HTTP/1.1 response.
public struct RawHTTPResponse: Sendable {
    public let status: Int
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public func headers(_ name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The body as a JSON object (or nil).
    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    }
}

public struct RawHTTPError: Error, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

/// A deliberately dumb HTTP/1.1 client over a plain socket: it sends exactly the
/// bytes it is given (no path normalisation, unlike libcurl), so tests can send
/// `..`, `%2f`, bare CRs and oversized headers. Blocking I/O runs on NIO's thread pool.
public enum RawHTTP {
    /// Sends `method target` with headers and body (adds Host, Content-Length and
    /// Connection: close), and reads the whole response.
    public static func request(
        port: Int, method: String, target: String, headers: [(String, String)] = [], body: [UInt8] = [], timeout: Int = 30
    ) async throws -> RawHTTPResponse {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        // One Connection header only: NIO keeps the connection open when it gets two.
        if !headers.contains(where: { $0.0.lowercased() == "connection" }) { head += "Connection: close\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || ["POST", "PUT", "PATCH"].contains(method) { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        return try await send(port: port, bytes: Array(head.utf8) + body, timeout: timeout)
    }

    /// Sends raw bytes and parses what comes back (until the server closes).
    public static func send(port: Int, bytes: [UInt8], timeout: Int = 30) async throws -> RawHTTPResponse {
        let received = try await runOnOwnThread { try exchange(port: port, bytes: bytes, timeout: timeout) }
        return try parse(received)
    }

    /// A blocking TCP socket connected to 127.0.0.1:`port`, with send and receive timeouts
    /// of `timeout` seconds (0: none). The caller closes it.
    public static func connectLoopback(port: Int, timeout: Int = 0) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPError(description: "socket() failed") }
        if timeout > 0 {
            var tv = timeval(tv_sec: timeout, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw RawHTTPError(description: "connect to 127.0.0.1:\(port) failed")
        }
        return fd
    }

    /// Reads the response on a socket the caller wrote a request to (until it is complete or
    /// the server closes), off the cooperative pool. The caller closes `fd`.
    public static func receive(fd: Int32) async throws -> RawHTTPResponse {
        try parse(try await runOnOwnThread { readResponse(fd) })
    }

    static func exchange(port: Int, bytes: [UInt8], timeout: Int) throws -> [UInt8] {
        let fd = try connectLoopback(port: port, timeout: timeout)
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n <= 0 { break }  // the server may answer and close before reading everything
            offset += n
        }
        return readResponse(fd)
    }

    static func readResponse(_ fd: Int32) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            out.append(contentsOf: buffer[0..<n])
            if isComplete(out) { break }  // servers may keep the connection open despite `close`
        }
        return out
    }

    /// A head plus a Content-Length body that has fully arrived.
    static func isComplete(_ data: [UInt8]) -> Bool {
        guard let end = find([13, 10, 13, 10], in: data) else { return false }
        let head = String(decoding: data[0..<end], as: UTF8.self).lowercased()
        guard let line = head.components(separatedBy: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
            let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
        else { return false }
        return data.count - (end + 4) >= length
    }

    static func parse(_ data: [UInt8]) throws -> RawHTTPResponse {
        guard let end = find([13, 10, 13, 10], in: data) else {
            throw RawHTTPError(description: "no complete response head (\(data.count) bytes received)")
        }
        let lines = String(decoding: data[0..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw RawHTTPError(description: "bad status line") }
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var body = Array(data[(end + 4)...])
        if headers.contains(where: { $0.0.lowercased() == "transfer-encoding" && $0.1.lowercased().contains("chunked") }) {
            body = dechunk(body)
        }
        return RawHTTPResponse(status: status, headers: headers, body: body)
    }

    static func dechunk(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while i < data.count {
            guard let lineEnd = find([13, 10], in: Array(data[i...])) else { break }
            let sizeText = String(decoding: data[i..<(i + lineEnd)], as: UTF8.self).split(separator: ";")[0]
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size > 0 else { break }
            let start = i + lineEnd + 2
            guard start + size <= data.count else { break }
            out.append(contentsOf: data[start..<(start + size)])
            i = start + size + 2
        }
        return out
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }
}
