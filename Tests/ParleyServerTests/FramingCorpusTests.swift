import Foundation
import ParleyTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The HTTP framing corpus (Tests/Fixtures/framing: HTTP Garden's request-smuggling payloads and
/// a few overflows) against the real binary, through the proxy and the hosted upstream. Each
/// payload goes on one connection, followed by `GET /healthz` with `Connection: close`, and
/// must end in one of two ways: exactly one request reaches the upstream (a raw loopback server
/// that records every request head) and Parley answers it, then at most the `/healthz` answer;
/// or one `400` and the connection closed, nothing forwarded. Never two upstream requests, never
/// a second answer for what was sent as one request.
@Suite(.serialized) struct FramingCorpusTests {
    struct Payload {
        let name: String
        let source: String
        let text: String
    }

    static let directory = packageRoot + "/Tests/Fixtures/framing"
    static let marker = "upstream-ok"

    static func corpus() throws -> [Payload] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".http") }.sorted()
        return try names.map { file in
            let lines = try String(contentsOfFile: directory + "/" + file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            let comments = lines.prefix { $0.hasPrefix("# ") }
            let source = comments.first.map { String($0.dropFirst("# source: ".count)) } ?? ""
            return Payload(name: String(file.dropLast(".http".count)), source: source, text: lines.dropFirst(comments.count).joined())
        }
    }

    /// The escaped text as bytes: `\r`, `\n`, `\t`, `\\`, `\xHH`; everything else as UTF-8.
    static func decode(_ text: String) throws -> [UInt8] {
        var out: [UInt8] = []
        let bytes = Array(text.utf8)
        var i = 0
        while i < bytes.count {
            guard bytes[i] == UInt8(ascii: "\\"), i + 1 < bytes.count else {
                out.append(bytes[i])
                i += 1
                continue
            }
            switch bytes[i + 1] {
            case UInt8(ascii: "r"): out.append(13)
            case UInt8(ascii: "n"): out.append(10)
            case UInt8(ascii: "t"): out.append(9)
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "x"):
                guard i + 3 < bytes.count, let byte = UInt8(String(decoding: bytes[(i + 2)...(i + 3)], as: UTF8.self), radix: 16) else {
                    throw RawHTTPError(description: "bad \\x escape at \(i)")
                }
                out.append(byte)
                i += 4
                continue
            default: throw RawHTTPError(description: "unknown escape at \(i)")
            }
            i += 2
        }
        return out
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        for i in start...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }

    /// One answer read off the connection.
    struct Answer: CustomStringConvertible {
        let status: Int
        let body: [UInt8]
        var description: String { "\(status) \(String(decoding: body.prefix(120), as: UTF8.self))" }
    }

    /// Splits what came back into answers, each framed by its `Content-Length` or chunked
    /// coding; what does not parse ends the list (and is reported as `rest`).
    static func answers(_ data: [UInt8]) -> (answers: [Answer], rest: [UInt8]) {
        var out: [Answer] = []
        var at = 0
        while at < data.count {
            guard let end = Self.find([13, 10, 13, 10], in: data, from: at) else { break }
            let lines = String(decoding: data[at..<end], as: UTF8.self).components(separatedBy: "\r\n")
            let parts = lines[0].split(separator: " ")
            guard parts.count >= 2, let status = Int(parts[1]) else { break }
            var length: Int?
            var chunked = false
            for line in lines.dropFirst() {
                let pair = line.split(separator: ":", maxSplits: 1).map { String($0).trimmingCharacters(in: .whitespaces).lowercased() }
                guard pair.count == 2 else { continue }
                if pair[0] == "content-length" { length = Int(pair[1]) }
                if pair[0] == "transfer-encoding", pair[1].contains("chunked") { chunked = true }
            }
            var i = end + 4
            var body: [UInt8] = []
            if chunked {
                while true {
                    guard let lineEnd = Self.find([13, 10], in: data, from: i),
                        let size = Int(String(String(decoding: data[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""), radix: 16)
                    else { return (out, Array(data[at...])) }
                    i = lineEnd + 2
                    if size == 0 {
                        guard let trailerEnd = Self.find([13, 10], in: data, from: i) else { return (out, Array(data[at...])) }
                        i = trailerEnd + 2
                        break
                    }
                    guard i + size + 2 <= data.count else { return (out, Array(data[at...])) }
                    body += data[i..<(i + size)]
                    i += size + 2
                }
            } else if status == 204 || status == 304 || (100...199).contains(status) {
                // no body
            } else if let length {
                guard i + length <= data.count else { return (out, Array(data[at...])) }
                body = Array(data[i..<(i + length)])
                i += length
            } else {
                body = Array(data[i...])
                i = data.count
            }
            if !(100...199).contains(status) { out.append(Answer(status: status, body: body)) }
            at = i
        }
        return (out, Array(data[at...]))
    }

    /// Sends `bytes` on a new connection and reads until Parley closes it (`closed`), or until
    /// nothing came for `timeout` seconds (`closed` false).
    static func exchange(port: Int, bytes: [UInt8], timeout: Int = 10) async throws -> (data: [UInt8], closed: Bool) {
        try await runOnOwnThread {
            let fd = try RawHTTP.connectLoopback(port: port, timeout: timeout)
            defer { close(fd) }
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { break }  // Parley may refuse and close before reading everything
                offset += n
            }
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { return (received, errno == ECONNRESET) }
                if n == 0 { return (received, true) }
                received.append(contentsOf: buffer[0..<n])
            }
        }
    }

    /// What happened to one payload at one path; nil when it ended one of the two good ways.
    static func verdict(
        upstreamRequests: Int, answers: [Answer], rest: [UInt8], closed: Bool
    ) -> String? {
        let seen = "upstream requests: \(upstreamRequests); answers: \(answers)\(rest.isEmpty ? "" : "; unparsed: \(rest.count) bytes")"
        guard closed else { return "the connection neither closed nor went quiet within the time; \(seen)" }
        guard rest.isEmpty else { return "bytes that are no answer came back; \(seen)" }
        let forwarded = answers.first.map { $0.status == 200 && String(decoding: $0.body, as: UTF8.self) == marker } ?? false
        if forwarded && upstreamRequests == 1 {
            // At most the /healthz answer after it.
            if answers.count == 1 { return nil }
            if answers.count == 2, answers[1].status == 200, String(decoding: answers[1].body, as: UTF8.self).contains("\"ok\"") { return nil }
            return "a second answer for one request; \(seen)"
        }
        if upstreamRequests == 0, answers.count == 1, answers[0].status == 400 { return nil }
        return "neither one forwarded request nor a clean 400; \(seen)"
    }

    @Test func everyPayloadReachesTheUpstreamOnceOrIsRefused() async throws {
        let corpus = try Self.corpus()
        #expect(corpus.count >= 50, "the corpus is there")
        var answers: [String: HostileAnswer] = [:]
        for payload in corpus {
            for prefix in ["p-", "w-"] {
                answers[prefix + payload.name] = HostileAnswer(.response(headers: [("Content-Type", "text/plain")], body: Self.marker))
            }
        }
        let upstream = try HostileUpstream(cases: answers)
        defer { upstream.stop() }

        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        // `plain` for the proxy; `web`, a SAML2 destination, for the hosted upstream: its flow
        // binds a browser to `/web/web/…` without any upstream taking part.
        let base = "http://127.0.0.1:\(upstream.port)/case"
        let destinations = try ScratchFile.write(
            #"{"destinations":[{"name":"plain","url":"\#(base)"},{"name":"web","url":"\#(base)","saml2":{}}]}"#, suffix: ".json")
        defer { try? FileManager.default.removeItem(atPath: destinations) }
        var env = ServeTests.environment(database: database, destinations: destinations)
        env["PARLEY_RATE_LIMIT_REGISTRATIONS"] = "off"
        let parley = try await ParleyProcess.start(environment: env)
        defer { Task { await parley.stop() } }
        let port = parley.port

        func register(_ destination: String) async throws -> String {
            let answer = try await RawHTTP.request(
                port: port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
                body: Array(#"{"destination":"\#(destination)"}"#.utf8))
            return try #require(answer.json?["clientToken"] as? String, "\(answer.status) \(answer.text)")
        }
        let proxyToken = try await register("plain")
        let webToken = try await register("web")
        let flow = try await RawHTTP.request(
            port: port, method: "POST", target: "/v1/flows", headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(webToken)")],
            body: Array(#"{"kind":"saml2"}"#.utf8))
        let flowURL = try #require((flow.json?["url"] as? String).flatMap { URLComponents(string: $0) }, "\(flow.status) \(flow.text)")
        let confirmed = try await ConfirmationForm.confirm(port: port, target: flowURL.path + "?" + (flowURL.query ?? ""))
        let binding = try #require(
            confirmed.headers("Set-Cookie").first { $0.hasPrefix("parley_flow=") }.map { String($0.prefix { $0 != ";" }) },
            "no binding cookie: \(confirmed.status) \(confirmed.headers)")

        // Both paths forward a well-formed request once: the oracle can see success.
        let sentinel = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n"
        var failures: [String] = []
        var forwarded = 0
        var refused = 0
        for payload in corpus {
            for (prefix, target, credential) in [
                ("p-", "/v1/proxy/p-\(payload.name)", "Authorization: Bearer \(proxyToken)"),
                ("w-", "/web/web/w-\(payload.name)", "Cookie: \(binding)"),
            ] {
                let text = payload.text.replacingOccurrences(of: "{TARGET}", with: target)
                    .replacingOccurrences(of: "{HOST}", with: "127.0.0.1:\(port)")
                    .replacingOccurrences(of: "{CREDENTIAL}", with: credential)
                let bytes = try Self.decode(text) + Array(sentinel.utf8)
                let (data, closed) = try await Self.exchange(port: port, bytes: bytes)
                let (answers, rest) = Self.answers(data)
                let count = upstream.count(prefix + payload.name)
                if let problem = Self.verdict(upstreamRequests: count, answers: answers, rest: rest, closed: closed) {
                    failures.append("\(target) [\(payload.source)]: \(problem)")
                } else if count == 1 {
                    forwarded += 1
                } else {
                    refused += 1
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of \(corpus.count * 2):\n\(failures.joined(separator: "\n"))")
        // Both outcomes occur: the oracle saw real forwarding, and real refusals.
        #expect(forwarded >= 10 && refused >= 10, "forwarded \(forwarded), refused \(refused)")
        print("framing corpus: \(corpus.count) payloads × 2 paths: \(forwarded) forwarded once, \(refused) refused with 400")
        #expect(!parley.log.contains("Fatal error"), "the server crashed")
        await parley.stop()
    }

    /// The oracle itself: a well-formed request is forwarded once and answered, then /healthz.
    @Test func theOracleTellsTheOutcomesApart() {
        let ok = Answer(status: 200, body: Array(Self.marker.utf8))
        let health = Answer(status: 200, body: Array(#"{"status":"ok"}"#.utf8))
        #expect(Self.verdict(upstreamRequests: 1, answers: [ok, health], rest: [], closed: true) == nil)
        #expect(Self.verdict(upstreamRequests: 1, answers: [ok], rest: [], closed: true) == nil)
        #expect(Self.verdict(upstreamRequests: 0, answers: [Answer(status: 400, body: [])], rest: [], closed: true) == nil)
        #expect(Self.verdict(upstreamRequests: 2, answers: [ok, ok, health], rest: [], closed: true) != nil)
        #expect(Self.verdict(upstreamRequests: 1, answers: [ok, Answer(status: 404, body: []), health], rest: [], closed: true) != nil)
        #expect(Self.verdict(upstreamRequests: 1, answers: [ok, Answer(status: 400, body: [])], rest: [], closed: true) != nil)
        #expect(Self.verdict(upstreamRequests: 1, answers: [Answer(status: 400, body: [])], rest: [], closed: true) != nil)
        #expect(Self.verdict(upstreamRequests: 1, answers: [ok], rest: [], closed: false) != nil)
        let split = Self.answers(Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nZ\r\n0\r\n\r\n".utf8))
        #expect(split.answers.map(\.status) == [200, 400] && split.rest.isEmpty)
    }
}
