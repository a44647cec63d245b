import Foundation
import ParleyTesting
import Store
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real `parley` binary against a real PostgreSQL and a hostile upstream that answers
/// every request with scripted, malformed bytes: broken status lines, conflicting framing,
/// truncated bodies, oversized and flooded heads, forbidden bytes, hostile cookies and
/// nonsensical token-endpoint answers. Each case checks the client's status, that the
/// process is alive (same pid, `/healthz` 200) and that nothing was stored.
@Suite(.serialized) struct HostileUpstreamTests {
    // MARK: the table

    enum PlainExpectation: Sendable {
        /// `502` problem `upstream_unavailable`.
        case badGateway
        /// Passed through: this status and, when given, this body, completely framed.
        case passes(status: Int, body: String?)
        /// The client's answer must not end cleanly: a `502` problem, or a body that ends
        /// short of what its head announced (or a chunked body without its last chunk).
        case aborted
        /// `504 upstream_timeout` (or `502`) within the destination's total timeout plus slack.
        case timeout
        /// Status `200` or `502`, and the head the client receives carries no NUL, bare CR or
        /// LF, no obs-fold line and only token field names.
        case sanitized(bareCR: Bool = false)
        /// `200`, and no cookie of this name stored for the registration.
        case cookieNotStored(String)
        /// `200`; a stored cookie of this name expires at most 400 days from now.
        case cookieClamped(String, mustExist: Bool)
        /// `200`; no unexpired cookie of this name.
        case cookieExpired(String)
        /// `200`; a cookie of this name is stored (positive control).
        case cookieStored(String)
        /// `200`; at most one cookie of this name (a 5 KiB cookie: no crash).
        case cookieSurvives(String)
        /// On the flood registration: `requests` calls, each `200` (or `502` when `mayRefuse`);
        /// afterwards at most 200 cookies and a bounded jar.
        case cookieFlood(requests: Int, mayRefuse: Bool)
    }

    enum TokenExpectation: Sendable {
        /// `502 upstream_unavailable`, no token row.
        case nonsense
        /// `503 upstream_unavailable` with `Retry-After`, no token row.
        case transient
    }

    enum RefreshExpectation: Sendable {
        /// `502`, the stored token row unchanged.
        case nonsense
        /// `503` with `Retry-After`, the stored token row unchanged.
        case transient
        /// One of these statuses, the stored token row unchanged.
        case kept(Set<Int>)
        /// The refresh token is dead: the row is deleted; the grant that follows is refused (`403`).
        case deleted
    }

    enum Kind: Sendable {
        case plain(PlainExpectation)
        /// A client-credentials destination whose token endpoint is this case.
        case token(TokenExpectation)
        /// As `token`, but the first answer stores a good token with a refresh token; the
        /// test then marks it stale and the refresh meets the case's later answers.
        case refresh(RefreshExpectation)
    }

    struct Case: Sendable {
        let name: String
        let answer: HostileAnswer
        let kind: Kind
        /// A token endpoint elsewhere (connection refused).
        var tokenEndpoint: String? = nil

        var destination: String {
            switch kind {
            case .plain: return "hostile"
            case .token, .refresh: return "tok-" + name
            }
        }

        var group: String {
            switch kind {
            case .plain(let expectation):
                switch expectation {
                case .badGateway: return "status/garbage/framing-head → 502"
                case .passes: return "passes"
                case .aborted: return "truncated body → aborted"
                case .timeout: return "stall/trickle → 504/502"
                case .sanitized: return "forbidden bytes"
                case .cookieNotStored, .cookieClamped, .cookieExpired, .cookieStored, .cookieSurvives, .cookieFlood: return "cookies"
                }
            case .token: return "token endpoint"
            case .refresh: return "refresh"
            }
        }
    }

    /// Destination timeouts of `hostile`.
    static let idleSeconds = 2.0
    static let totalSeconds = 3.0

    static func head(_ statusLine: String, _ fields: [String], body: String = "") -> String {
        statusLine + "\r\n" + fields.map { $0 + "\r\n" }.joined() + "\r\n" + body
    }

    static func tokenJSON(_ members: String) -> HostileReply { .json(members) }

    static let goodToken = #"{"access_token":"good-access","token_type":"Bearer","expires_in":3600}"#
    static let goodTokenWithRefresh = #"{"access_token":"good-access","token_type":"Bearer","expires_in":3600,"refresh_token":"good-refresh"}"#

    static func plainCases() -> [Case] {
        var cases: [Case] = []
        func add(_ name: String, _ answer: HostileAnswer, _ expectation: PlainExpectation) {
            cases.append(Case(name: name, answer: answer, kind: .plain(expectation)))
        }
        func leak(_ name: String) -> String { "Set-Cookie: leak_\(name.replacingOccurrences(of: "-", with: "_"))=1; Path=/" }

        // Positive control: a well-behaved answer passes and its cookie is kept.
        add("ok", HostileAnswer(.response(headers: [("Set-Cookie", "c_ok=1; Path=/"), ("X-Final", "yes")], body: "hello")), .cookieStored("c_ok"))

        // Status lines.
        for (name, line) in [
            ("status-600", "HTTP/1.1 600 Too Far"), ("status-99", "HTTP/1.1 99 Too Low"), ("status-000", "HTTP/1.1 000 Zero"),
            ("status-1000", "HTTP/1.1 1000 Four Digits"), ("status-huge", "HTTP/1.1 99999999999999999999 Huge"),
            ("status-negative", "HTTP/1.1 -200 Negative"), ("status-plus", "HTTP/1.1 +200 Plus"), ("status-non-numeric", "HTTP/1.1 abc Letters"),
            ("status-missing", "HTTP/1.1"), ("status-missing-space", "HTTP/1.1 "), ("status-hex", "HTTP/1.1 0xC8 Hex"),
        ] {
            add(name, .raw(head(line, [leak(name), "Content-Length: 2", "Connection: close"], body: "ok")), .badGateway)
        }
        add("garbage-hello", .raw("hello\r\n\r\n"), .badGateway)
        add("garbage-binary", .bytes([0x16, 0x03, 0x01, 0x00, 0xff, 0x00, 0x0d, 0x0a, 0x0d, 0x0a, 0xfe, 0x80, 0x00]), .badGateway)
        add("http09-body", .raw("<html><body>an HTTP/0.9 answer</body></html>\n"), .badGateway)
        add("empty-reply", .bytes([]), .badGateway)
        add("partial-status-line", .raw("HTTP/1.1 20"), .badGateway)
        add("close-inside-head", .raw("HTTP/1.1 200 OK\r\n\(leak("close-inside-head"))\r\nContent-Le"), .badGateway)
        add("half-close-inside-head", .raw("HTTP/1.1 200 OK\r\nX-Partial: yes\r\n", ending: .halfClose), .badGateway)

        // Interim answers before the final one.
        let final = "HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        add("interim-100", .raw("HTTP/1.1 100 Continue\r\n\r\n" + final), .passes(status: 200, body: "hello"))
        add("interim-103", .raw("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + final), .passes(status: 200, body: "hello"))
        add(
            "interim-several",
            .raw("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.js>; rel=preload\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n" + final),
            .passes(status: 200, body: "hello"))

        // Framing the head announces but cannot be trusted.
        add(
            "cl-and-chunked",
            .raw(head("HTTP/1.1 200 OK", [leak("cl-and-chunked"), "Content-Length: 5", "Transfer-Encoding: chunked"], body: "5\r\nhello\r\n0\r\n\r\n")),
            .badGateway)
        add("cl-two-values", .raw(head("HTTP/1.1 200 OK", [leak("cl-two-values"), "Content-Length: 5", "Content-Length: 6"], body: "hello!")), .badGateway)
        add("cl-list", .raw(head("HTTP/1.1 200 OK", [leak("cl-list"), "Content-Length: 5, 6"], body: "hello!")), .badGateway)
        add("cl-non-numeric", .raw(head("HTTP/1.1 200 OK", [leak("cl-non-numeric"), "Content-Length: abc"], body: "hello")), .badGateway)
        add("cl-negative", .raw(head("HTTP/1.1 200 OK", [leak("cl-negative"), "Content-Length: -1"], body: "hello")), .badGateway)
        add("cl-huge", .raw(head("HTTP/1.1 200 OK", [leak("cl-huge"), "Content-Length: 99999999999999999999"], body: "hello")), .badGateway)

        // Bodies that end early or break their chunking.
        add("body-short-close", .raw(head("HTTP/1.1 200 OK", ["Content-Length: 100"], body: "only ten b")), .aborted)
        add("body-short-half-close", .raw(head("HTTP/1.1 200 OK", ["Content-Length: 100"], body: "only ten b"), ending: .halfClose), .aborted)
        add("body-short-stall", .raw(head("HTTP/1.1 200 OK", ["Content-Length: 100"], body: "only ten b"), ending: .stall), .aborted)
        add(
            "body-large-short",
            .raw(head("HTTP/1.1 200 OK", ["Content-Length: 1048576"], body: String(repeating: "x", count: 300_000))), .aborted)
        add("chunk-bad-size", .raw(head("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], body: "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n")), .aborted)
        add("chunk-longer-than-declared", .raw(head("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], body: "5\r\nhello world\r\n0\r\n\r\n")), .aborted)
        add("chunk-missing-final", .raw(head("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], body: "5\r\nhello\r\n")), .aborted)
        add(
            "chunk-size-overflow",
            .raw(head("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], body: "5\r\nhello\r\nffffffffffffffffffff\r\nworld\r\n0\r\n\r\n")), .aborted)
        add(
            "chunked-with-trailers",
            .raw(head("HTTP/1.1 200 OK", ["X-Final: yes", "Transfer-Encoding: chunked", "Trailer: X-Checksum"], body: "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: 42\r\n\r\n")),
            .passes(status: 200, body: "hello world"))

        // Heads too large, too many fields, never ending.
        let filler = String(repeating: "f", count: 700)
        add(
            "head-over-64k",
            .raw(head("HTTP/1.1 200 OK", [leak("head-over-64k")] + (0..<100).map { "X-Fill-\($0): \(filler)" } + ["Content-Length: 2"], body: "ok")),
            .badGateway)
        add(
            "header-line-100k",
            .raw(head("HTTP/1.1 200 OK", [leak("header-line-100k"), "X-Huge: " + String(repeating: "h", count: 100 * 1024), "Content-Length: 2"], body: "ok")),
            .badGateway)
        add(
            "header-flood",
            .raw(head("HTTP/1.1 200 OK", [leak("header-flood")] + (0..<400).map { "X-F\($0): v" } + ["Content-Length: 2"], body: "ok")), .badGateway)
        add(
            "head-trickled-forever",
            .raw("HTTP/1.1 200 OK\r\n", ending: .trickle(pattern: Array("X-Trickle: more\r\n".utf8), interval: .milliseconds(100))), .timeout)
        add("stall-after-status-line", .raw("HTTP/1.1 200 OK\r\n", ending: .stall), .timeout)
        add("stall-silent", .bytes([], ending: .stall), .timeout)

        // Bytes that must never reach a client as they are.
        func forbidden(_ name: String, _ field: [UInt8], bareCR: Bool = false) {
            let bytes = Array("HTTP/1.1 200 OK\r\n".utf8) + field + Array("\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".utf8)
            add(name, .bytes(bytes), .sanitized(bareCR: bareCR))
        }
        forbidden("nul-in-value", Array("X-Evil: a".utf8) + [0] + Array("b".utf8))
        forbidden("bare-cr-in-value", Array("X-Evil: a\rInjected: yes".utf8), bareCR: true)
        forbidden("bare-lf-in-value", Array("X-Evil: a\nInjected: yes".utf8))
        forbidden("obs-fold", Array("X-Folded: first\r\n  continued\r\n\tand more".utf8))
        forbidden("space-before-colon", Array("Foo : bar".utf8))
        forbidden("nameless-field", Array(": nameless".utf8))
        forbidden("no-colon", Array("NoColonAtAll".utf8))
        forbidden("colon-games", Array("X-A:: b:c".utf8))
        forbidden("non-ascii-value", Array("X-Utf: caf".utf8) + [0xC3, 0xA9, 0x20, 0xFF, 0xFE])
        forbidden("non-ascii-name", Array("X-".utf8) + [0xFF, 0xC3, 0xA9] + Array(": v".utf8))
        forbidden("control-in-value", Array("X-Ctl: a".utf8) + [0x01, 0x1B, 0x7F] + Array("b".utf8))
        forbidden("space-in-name", Array("X Spaced Name: v".utf8))
        add("nul-in-reason", .bytes(Array("HTTP/1.1 200 O".utf8) + [0] + Array("K\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".utf8)), .sanitized())

        // Cookies from a hostile upstream (the upstream is 127.0.0.1).
        func cookie(_ name: String, _ setCookie: String, _ expectation: PlainExpectation) {
            add(name, HostileAnswer(.response(headers: [("Set-Cookie", setCookie)], body: "ok")), expectation)
        }
        cookie("cookie-domain-com", "c_com=1; Domain=com; Path=/", .cookieNotStored("c_com"))
        cookie("cookie-domain-dot-com", "c_dotcom=1; Domain=.com; Path=/", .cookieNotStored("c_dotcom"))
        cookie("cookie-domain-co-uk", "c_couk=1; Domain=co.uk; Path=/", .cookieNotStored("c_couk"))
        cookie("cookie-domain-other-host", "c_other=1; Domain=example.org; Path=/", .cookieNotStored("c_other"))
        cookie("cookie-domain-partial-ip", "c_partial=1; Domain=0.0.1; Path=/", .cookieNotStored("c_partial"))
        cookie("cookie-domain-dot-partial-ip", "c_dotpartial=1; Domain=.0.0.1; Path=/", .cookieNotStored("c_dotpartial"))
        cookie("cookie-max-age-huge", "c_maxage=1; Max-Age=99999999999999999999; Path=/", .cookieClamped("c_maxage", mustExist: true))
        cookie("cookie-max-age-int64", "c_maxage64=1; Max-Age=9223372036854775807; Path=/", .cookieClamped("c_maxage64", mustExist: true))
        cookie("cookie-expires-9999", "c_exp9999=1; Expires=Fri, 31 Dec 9999 23:59:59 GMT; Path=/", .cookieClamped("c_exp9999", mustExist: true))
        cookie("cookie-expires-99999", "c_exp99999=1; Expires=Fri, 31 Dec 99999 23:59:59 GMT; Path=/", .cookieClamped("c_exp99999", mustExist: false))
        cookie("cookie-max-age-negative", "c_negative=1; Max-Age=-1; Path=/", .cookieExpired("c_negative"))
        cookie("cookie-5k", "c_big=" + String(repeating: "b", count: 5 * 1024) + "; Path=/", .cookieSurvives("c_big"))
        add(
            "cookie-flood-one-answer",
            .raw(head("HTTP/1.1 200 OK", (0..<1000).map { "Set-Cookie: f\($0)=v; Path=/" } + ["Content-Length: 2", "Connection: close"], body: "ok")),
            .cookieFlood(requests: 1, mayRefuse: true))
        // 30 answers, each with 10 new cookies of 1 KiB: 300 cookies, 300 KiB offered.
        let value = String(repeating: "v", count: 1024)
        add(
            "cookie-flood-many-answers",
            .sequence((0..<30).map { i in .response(headers: (0..<10).map { ("Set-Cookie", "m\(i)_\($0)=\(value); Path=/") }, body: "ok") }),
            .cookieFlood(requests: 30, mayRefuse: false))
        return cases
    }

    static func tokenCases() -> [Case] {
        var cases: [Case] = []
        func nonsense(_ name: String, _ reply: HostileReply) {
            cases.append(Case(name: name, answer: HostileAnswer(reply), kind: .token(.nonsense)))
        }
        nonsense("expires-missing", .json(#"{"access_token":"a1","token_type":"Bearer"}"#))
        nonsense("expires-negative", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":-3600}"#))
        nonsense("expires-zero", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":0}"#))
        nonsense("expires-fractional", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":3600.5}"#))
        nonsense("expires-huge", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":1e300}"#))
        nonsense("expires-beyond-int64", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":99999999999999999999999}"#))
        nonsense("expires-string", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":"abc"}"#))
        nonsense("expires-null", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":null}"#))
        nonsense("access-token-empty", .json(#"{"access_token":"","token_type":"Bearer","expires_in":3600}"#))
        nonsense("access-token-number", .json(#"{"access_token":12345,"token_type":"Bearer","expires_in":3600}"#))
        nonsense("access-token-1mib", .json(#"{"access_token":""# + String(repeating: "t", count: 1 << 20) + #"","token_type":"Bearer","expires_in":3600}"#))
        nonsense("body-2mib", .json(#"{"access_token":"a1","token_type":"Bearer","expires_in":3600,"pad":""# + String(repeating: "p", count: 2 << 20) + #""}"#))
        nonsense("non-json-html", .response(headers: [("Content-Type", "text/html")], body: "<html><body>Welcome</body></html>"))
        nonsense("json-array", .json(#"[{"access_token":"a1","token_type":"Bearer","expires_in":3600}]"#))
        nonsense("token-type-mac", .json(#"{"access_token":"a1","token_type":"mac","expires_in":3600}"#))
        nonsense("token-type-missing", .json(#"{"access_token":"a1","expires_in":3600}"#))
        nonsense("truncated-json", .json(#"{"access_token":"a1","token_type":"Bea"#))
        nonsense("empty-body", .response(body: ""))
        nonsense("token-status-600", .raw("HTTP/1.1 600 Nope\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
        nonsense("token-not-http", .raw("hello\r\n\r\n"))

        func transient(_ name: String, _ reply: HostileReply) {
            cases.append(Case(name: name, answer: HostileAnswer(reply), kind: .token(.transient)))
        }
        transient("unavailable-503", .json(status: 503, reason: "Service Unavailable", headers: [("Retry-After", "7")], #"{"error":"temporarily_unavailable"}"#))
        transient("throttled-429", .json(status: 429, reason: "Too Many Requests", headers: [("Retry-After", "7")], #"{"error":"slow_down"}"#))
        var refused = Case(name: "connection-refused", answer: HostileAnswer(.response(body: "")), kind: .token(.transient))
        refused.tokenEndpoint = "closed-port"
        cases.append(refused)

        func refresh(_ name: String, _ later: HostileReply, _ expectation: RefreshExpectation) {
            cases.append(Case(name: "refresh-" + name, answer: .sequence([.json(goodTokenWithRefresh), later]), kind: .refresh(expectation)))
        }
        refresh("html", .response(headers: [("Content-Type", "text/html")], body: "<html>maintenance</html>"), .nonsense)
        refresh("expires-negative", .json(#"{"access_token":"a2","token_type":"Bearer","expires_in":-1}"#), .nonsense)
        refresh("access-token-empty", .json(#"{"access_token":"","token_type":"Bearer","expires_in":3600}"#), .nonsense)
        refresh("truncated-json", .json(#"{"access_token":"a2","tok"#), .nonsense)
        refresh("status-600", .raw("HTTP/1.1 600 Nope\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"), .nonsense)
        refresh("unavailable-503", .json(status: 503, reason: "Service Unavailable", headers: [("Retry-After", "5")], "{}"), .transient)
        refresh("throttled-429", .json(status: 429, reason: "Too Many Requests", headers: [("Retry-After", "5")], "{}"), .transient)
        refresh("invalid-client", .json(status: 400, reason: "Bad Request", #"{"error":"invalid_client"}"#), .kept([403, 502, 503]))
        refresh(
            "waf-403", .response(status: 403, reason: "Forbidden", headers: [("Content-Type", "text/html")], body: "<html><h1>Request blocked</h1></html>"),
            .kept([403, 502, 503]))
        refresh("invalid-grant", .json(status: 400, reason: "Bad Request", #"{"error":"invalid_grant"}"#), .deleted)
        return cases
    }

    // MARK: the running system

    /// The one `parley` process (replaced only when a case killed it, which fails the test).
    final class Instance: Sendable {
        struct Current: Sendable {
            var process: ParleyProcess
            var port: Int { process.port }
        }
        let current: Mutex<Current>
        let environment: [String: String]
        let originalPID: Int32

        init(environment: [String: String]) async throws {
            let process = try await ParleyProcess.start(environment: environment)
            self.environment = environment
            self.originalPID = process.process.processIdentifier
            self.current = Mutex(Current(process: process))
        }

        var process: ParleyProcess { current.withLock { $0.process } }
        var port: Int { process.port }

        /// Alive: the process with pid `expected` still runs and `/healthz` answers `200`.
        func alive(expected: Int32) async -> [String] {
            var problems: [String] = []
            let process = self.process
            if process.process.processIdentifier != expected { problems.append("pid \(process.process.processIdentifier), expected \(expected)") }
            if !process.process.isRunning || kill(process.process.processIdentifier, 0) != 0 {
                problems.append("process \(process.process.processIdentifier) is not running")
            }
            let health = try? await RawHTTP.request(port: process.port, method: "GET", target: "/healthz", timeout: 5)
            if health?.status != 200 { problems.append("/healthz answered \(health.map { String($0.status) } ?? "nothing")") }
            return problems
        }

        /// A case killed the process: report its last words and start another so the rest of
        /// the table still runs.
        func replaceDead() async throws -> String {
            let dead = process
            let log = String(dead.log.suffix(1500))
            await dead.stop()
            let fresh = try await ParleyProcess.start(environment: environment)
            current.withLock { $0.process = fresh }
            return log
        }

        func stop() async { await process.stop() }
    }

    struct Registration: Sendable {
        let id: UUID
        let token: String
        var auth: [(String, String)] { [("Authorization", "Bearer \(token)")] }
    }

    struct World: Sendable {
        let instance: Instance
        let store: PostgresStore
        let server: HostileUpstream
        let main: Registration
        let flood: Registration
        let tokenRegistrations: [String: Registration]
    }

    static func register(_ instance: Instance, destination: String) async throws -> Registration {
        let response = try await RawHTTP.request(
            port: instance.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
            body: Array(#"{"destination":"\#(destination)"}"#.utf8))
        guard response.status == 201, let id = (response.json?["id"] as? String).flatMap(UUID.init(uuidString:)),
            let token = response.json?["clientToken"] as? String
        else { throw RawHTTPError(description: "registration at \(destination) failed: \(response.status) \(response.text)") }
        return Registration(id: id, token: token)
    }

    static func destinationsFile(server: HostileUpstream, cases: [Case], closedPort: Int) throws -> String {
        var destinations: [[String: Any]] = [
            [
                "name": "hostile", "url": "http://127.0.0.1:\(server.port)/case",
                "timeouts": ["connectSeconds": 2, "idleSeconds": idleSeconds, "totalSeconds": totalSeconds],
            ]
        ]
        for c in cases {
            switch c.kind {
            case .plain: continue
            case .token, .refresh:
                let endpoint = c.tokenEndpoint == nil ? server.url(c.name) : "http://127.0.0.1:\(closedPort)/token"
                destinations.append([
                    "name": c.destination, "url": server.url("api"),
                    "oauth2": ["grant": "client_credentials", "tokenEndpoint": endpoint, "clientId": "parley", "clientSecret": "s3cret"],
                ])
            }
        }
        let json = try JSONSerialization.data(withJSONObject: ["destinations": destinations])
        return try ScratchFile.write(String(decoding: json, as: UTF8.self), suffix: ".json")
    }

    // MARK: the test

    @Test func malformedUpstreamAnswersNeitherCrashParleyNorStoreAnything() async throws {
        let started = ContinuousClock.now
        let cases = Self.plainCases() + Self.tokenCases()
        #expect(cases.count >= 60)
        #expect(Set(cases.map(\.name)).count == cases.count, "case names are unique")

        var answers: [String: HostileAnswer] = [:]
        for c in cases { answers[c.name] = c.answer }
        // The OAuth2 destinations' API: a challenge without a token, a plain answer with one.
        answers["api"] = HostileAnswer(
            replies: [.json(#"{"api":"ok"}"#)],
            withoutAuthorization: .response(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Bearer")], body: ""))
        let server = try HostileUpstream(cases: answers)
        defer { server.stop() }
        let closed = try LoopbackSocket(listening: false)

        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let destinations = try Self.destinationsFile(server: server, cases: cases, closedPort: closed.port)
        defer { try? FileManager.default.removeItem(atPath: destinations) }
        let environment = [
            "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": "k1:" + Data(repeating: 5, count: 32).base64EncodedString(),
            "PARLEY_DESTINATIONS": destinations, "PARLEY_LOG_LEVEL": "info", "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
        ]
        let instance = try await Instance(environment: environment)
        let store = PostgresStore(configuration: StoreConfiguration(connectionString: database, maxConnections: 2), logger: quietLogger)

        var tokenRegistrations: [String: Registration] = [:]
        for c in cases where c.destination != "hostile" {
            tokenRegistrations[c.name] = try await Self.register(instance, destination: c.destination)
        }
        let world = World(
            instance: instance, store: store, server: server, main: try await Self.register(instance, destination: "hostile"),
            flood: try await Self.register(instance, destination: "hostile"), tokenRegistrations: tokenRegistrations)

        var outcomes: [(Case, [String], Duration, String)] = []
        for c in cases {
            let caseStart = ContinuousClock.now
            let pid = instance.process.process.processIdentifier
            var failures: [String]
            var observed = ""
            do {
                let result = try await Self.run(c, world)
                failures = result.failures
                observed = result.observed
            } catch {
                failures = ["error: \(error)"]
            }
            let alive = await instance.alive(expected: pid)
            if !alive.isEmpty {
                failures += alive
                if !instance.process.process.isRunning {
                    let lastWords = try await instance.replaceDead()
                    failures.append("parley died; its last output:\n\(lastWords)")
                }
            }
            let elapsed = ContinuousClock.now - caseStart
            outcomes.append((c, failures, elapsed, observed))
            #expect(failures.isEmpty, "\(c.name) [\(c.group)]: \(failures.joined(separator: "; "))")
        }

        // After the table: the very process that started is still serving.
        let finalCheck = await instance.alive(expected: instance.originalPID)
        #expect(finalCheck.isEmpty, "after the table: \(finalCheck)")
        #expect(instance.process.process.processIdentifier == instance.originalPID, "parley was never replaced")
        #expect(!instance.process.log.contains("Fatal error"), "a trap in the log")

        // A summary a person can read.
        var summary = "hostile upstream table: \(cases.count) cases, \(outcomes.filter { $0.1.isEmpty }.count) pass, "
        summary += "\(outcomes.filter { !$0.1.isEmpty }.count) fail, \(ContinuousClock.now - started)\n"
        for (c, failures, elapsed, observed) in outcomes {
            let ms = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
            summary += "  \(failures.isEmpty ? "PASS" : "FAIL") \(c.name) [\(c.group)] \(ms) ms: \(observed)"
            if !failures.isEmpty { summary += " — " + failures.joined(separator: "; ").prefix(400) }
            summary += "\n"
        }
        print(summary)

        await instance.stop()
        await store.shutdown()
        withExtendedLifetime(closed) {}  // the refused port stays reserved until here
    }

    // MARK: one case

    /// What a case saw (for the summary), and what went wrong.
    struct Result: Sendable {
        var failures: [String] = []
        var observed = ""
    }

    static func run(_ c: Case, _ world: World) async throws -> Result {
        var result = Result()
        switch c.kind {
        case .plain(let expectation): result.failures = try await runPlain(c, expectation, world, &result.observed)
        case .token(let expectation): result.failures = try await runToken(c, expectation, world, &result.observed)
        case .refresh(let expectation): result.failures = try await runRefresh(c, expectation, world, &result.observed)
        }
        return result
    }

    static func cookieRows(_ store: PostgresStore, _ registration: Registration) async throws -> [(name: String, expiresAt: Date?, bytes: Int)] {
        try await store.query(
            """
            SELECT name, expires_at, octet_length(name) + octet_length(value_sealed) AS bytes FROM cookies
            WHERE registration_id = \(registration.id)
            """
        ).map { (try $0.string("name"), try $0.optionalDate("expires_at"), try $0.int("bytes")) }
    }

    static func tokenRows(_ store: PostgresStore, destination: String) async throws -> [(access: [UInt8], refresh: [UInt8]?)] {
        try await store.query("SELECT access_token_sealed, refresh_token_sealed FROM tokens WHERE destination = \(destination)")
            .map { (try $0.bytes("access_token_sealed"), try $0.optionalBytes("refresh_token_sealed")) }
    }

    static func describe(_ r: RawFramedResponse) -> String {
        let code = (r.json?["code"] as? String).map { " code=\($0)" } ?? ""
        return "status \(r.status.map(String.init) ?? "none")\(code) framing \(r.framing)\(r.timedOut ? " (timed out)" : "")"
    }

    static func isProblem(_ r: RawFramedResponse, status: Int, code: String) -> Bool {
        r.status == status && r.header("Content-Type") == "application/problem+json" && r.json?["code"] as? String == code
    }

    static func runPlain(_ c: Case, _ expectation: PlainExpectation, _ world: World, _ observed: inout String) async throws -> [String] {
        var failures: [String] = []
        let registration: Registration
        if case .cookieFlood = expectation { registration = world.flood } else { registration = world.main }
        let before = Set(try await cookieRows(world.store, registration).map(\.name))

        let started = ContinuousClock.now
        var response = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy/\(c.name)", headers: registration.auth)
        let elapsed = ContinuousClock.now - started
        observed = describe(response)
        if world.server.requests(c.name).isEmpty { failures.append("the request never reached the hostile upstream") }

        switch expectation {
        case .badGateway:
            if !isProblem(response, status: 502, code: "upstream_unavailable") || !response.isComplete {
                failures.append("expected a complete 502 upstream_unavailable problem, got \(describe(response))")
            }
        case .passes(let status, let body):
            if response.status != status || !response.isComplete { failures.append("expected a complete \(status), got \(describe(response))") }
            if let body, response.text != body { failures.append("body \(response.text.prefix(80).debugDescription), expected \(body.debugDescription)") }
            if response.header("X-Final") != "yes" { failures.append("the final answer's X-Final header is missing") }
        case .aborted:
            let cleanProblem = isProblem(response, status: 502, code: "upstream_unavailable") || isProblem(response, status: 504, code: "upstream_timeout")
            var visiblyCut = false
            switch response.framing {
            case .noHead: visiblyCut = true
            case .contentLength(let declared, let received): visiblyCut = received < declared
            case .chunked(let terminated, let malformed): visiblyCut = !terminated || malformed
            case .noBody, .closeDelimited, .invalidHead: visiblyCut = false
            }
            if !(cleanProblem || (visiblyCut && !response.timedOut)) {
                failures.append("the truncated upstream body reached the client as a clean answer: \(describe(response))")
            }
            if response.timedOut { failures.append("the client's connection was left open after the upstream failed") }
        case .timeout:
            let ok = isProblem(response, status: 504, code: "upstream_timeout") || isProblem(response, status: 502, code: "upstream_unavailable")
            if !ok { failures.append("expected 504 upstream_timeout or 502, got \(describe(response))") }
            if elapsed > .seconds(totalSeconds + 4) { failures.append("took \(elapsed), over the destination's total timeout") }
        case .sanitized(let bareCR):
            if response.status != 200 && !isProblem(response, status: 502, code: "upstream_unavailable") {
                failures.append("expected 200 or 502, got \(describe(response))")
            }
            failures += response.headViolations.map { "forwarded: \($0)" }
            for (name, _) in response.headers where !name.utf8.allSatisfy(isTokenCharacter) {
                failures.append("forwarded a field name that is not a token: \(name.debugDescription)")
            }
            if bareCR, response.headers.contains(where: { $0.name.lowercased() == "injected" }) {
                failures.append("a header smuggled inside another's value reached the client")
            }
        case .cookieNotStored(let name), .cookieSurvives(let name):
            if response.status != 200 { failures.append("expected 200, got \(describe(response))") }
            let rows = try await cookieRows(world.store, registration).filter { $0.name == name }
            if case .cookieNotStored = expectation, !rows.isEmpty { failures.append("cookie \(name) was stored") }
            if rows.count > 1 { failures.append("cookie \(name) stored \(rows.count) times") }
        case .cookieStored(let name):
            if response.status != 200 || !response.isComplete { failures.append("expected a complete 200, got \(describe(response))") }
            if try await cookieRows(world.store, registration).allSatisfy({ $0.name != name }) { failures.append("cookie \(name) was not stored") }
        case .cookieClamped(let name, let mustExist):
            if response.status != 200 { failures.append("expected 200, got \(describe(response))") }
            let rows = try await cookieRows(world.store, registration).filter { $0.name == name }
            if mustExist && rows.isEmpty { failures.append("cookie \(name) was not stored (expected: kept with a clamped lifetime)") }
            let limit = Date().addingTimeInterval(400 * 86400 + 60)
            for row in rows {
                if let expires = row.expiresAt, expires > limit { failures.append("cookie \(name) expires \(Int(expires.timeIntervalSinceNow / 86400)) days from now, beyond 400") }
            }
        case .cookieExpired(let name):
            if response.status != 200 { failures.append("expected 200, got \(describe(response))") }
            let now = Date()
            let live = try await cookieRows(world.store, registration).filter { $0.name == name && ($0.expiresAt ?? .distantFuture) > now }
            if !live.isEmpty { failures.append("cookie \(name) with Max-Age=-1 is stored as live") }
        case .cookieFlood(let requests, let mayRefuse):
            for i in 0..<requests {
                if i > 0 { response = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy/\(c.name)", headers: registration.auth) }
                let acceptable = response.status == 200 || (mayRefuse && isProblem(response, status: 502, code: "upstream_unavailable"))
                if !acceptable {
                    failures.append("answer \(i): \(describe(response))")
                    break
                }
            }
            let rows = try await cookieRows(world.store, registration)
            let bytes = rows.reduce(0) { $0 + $1.bytes }
            observed += "; jar: \(rows.count) cookies, \(bytes) bytes"
            if rows.count > 200 { failures.append("\(rows.count) cookies stored for one registration (cap 200)") }
            // 128 KiB of cookies, plus sealing overhead (key id, nonce, tag) per cookie.
            if bytes > 128 * 1024 + 200 * 64 { failures.append("the jar holds \(bytes) bytes (cap 128 KiB)") }
        }

        // Nothing stored: no new cookie for this registration (unless the case is about cookies),
        // no token for the plain destination.
        let after = Set(try await cookieRows(world.store, registration).map(\.name))
        let added = after.subtracting(before)
        switch expectation {
        case .cookieStored, .cookieClamped, .cookieSurvives, .cookieFlood: break
        case .cookieNotStored, .cookieExpired:
            if !added.subtracting(["c_negative"]).isEmpty { failures.append("cookies stored: \(added.sorted())") }
        default:
            if !added.isEmpty { failures.append("cookies stored from a refused answer: \(added.sorted())") }
        }
        if try await !tokenRows(world.store, destination: "hostile").isEmpty { failures.append("a token row appeared for the plain destination") }
        return failures
    }

    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        default: return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    static func runToken(_ c: Case, _ expectation: TokenExpectation, _ world: World, _ observed: inout String) async throws -> [String] {
        var failures: [String] = []
        guard let registration = world.tokenRegistrations[c.name] else { return ["no registration"] }
        let response = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy", headers: registration.auth)
        observed = describe(response) + (response.header("Retry-After").map { " Retry-After \($0)" } ?? "")
        if c.tokenEndpoint == nil && world.server.count(c.name) == 0 { failures.append("the token endpoint was never called") }
        switch expectation {
        case .nonsense:
            if !isProblem(response, status: 502, code: "upstream_unavailable") {
                failures.append("expected 502 upstream_unavailable, got \(describe(response)) \(response.json?["detail"] as? String ?? "")")
            }
        case .transient:
            if !isProblem(response, status: 503, code: "upstream_unavailable") {
                failures.append("expected 503 upstream_unavailable, got \(describe(response))")
            }
            if response.header("Retry-After").flatMap({ Int($0) }) == nil { failures.append("no Retry-After") }
        }
        let rows = try await tokenRows(world.store, destination: c.destination)
        if !rows.isEmpty { failures.append("\(rows.count) token row(s) stored from a \(expectation) answer") }
        if try await !cookieRows(world.store, registration).isEmpty { failures.append("cookies stored") }
        return failures
    }

    static func runRefresh(_ c: Case, _ expectation: RefreshExpectation, _ world: World, _ observed: inout String) async throws -> [String] {
        var failures: [String] = []
        guard let registration = world.tokenRegistrations[c.name] else { return ["no registration"] }
        // 1. A good token with a refresh token is issued and used.
        let first = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy", headers: registration.auth)
        guard first.status == 200 else { return ["set-up: the first call with a good token answered \(describe(first))"] }
        let stored = try await tokenRows(world.store, destination: c.destination)
        guard stored.count == 1, stored[0].refresh != nil else { return ["set-up: expected one stored token with a refresh token, found \(stored.count)"] }
        // 2. It goes stale (well inside Parley's 30 s skew), so the next call refreshes.
        _ = try await world.store.execute("UPDATE tokens SET expires_at = now() - interval '1 minute' WHERE destination = \(c.destination)")
        // Parley caches tokens and drops them when a change is announced: a change made
        // behind its back is announced the same way, and the next call reads the row.
        // The notification reaches Parley a moment later: until then a call may still use
        // the cached (stale-unaware) copy, which changes nothing; poll until one refreshes.
        _ = try await world.store.execute("SELECT pg_notify('parley_cache', 't:*')")
        var response = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy", headers: registration.auth)
        let deadline = ContinuousClock.now + .seconds(3)
        while world.server.requests(c.name).count < 2 && ContinuousClock.now < deadline {
            response = try await RawHTTP.framedRequest(port: world.instance.port, target: "/v1/proxy", headers: registration.auth)
        }
        let calls = world.server.requests(c.name)
        if calls.count < 2 || calls[1].formFields["grant_type"] != "refresh_token" {
            failures.append("no refresh_token call reached the token endpoint (calls: \(calls.map { $0.formFields["grant_type"] ?? "?" }))")
        }
        let detail = response.json?["detail"] as? String ?? ""
        let after = try await tokenRows(world.store, destination: c.destination)
        let unchanged = after.count == 1 && after[0].access == stored[0].access && after[0].refresh == stored[0].refresh
        observed = describe(response) + (response.header("Retry-After").map { " Retry-After \($0)" } ?? "")
        observed += after.isEmpty ? "; token row deleted" : unchanged ? "; token row unchanged" : "; token row changed"
        switch expectation {
        case .nonsense:
            if !isProblem(response, status: 502, code: "upstream_unavailable") {
                failures.append("expected 502 upstream_unavailable, got \(describe(response)) \(detail)")
            }
        case .transient:
            if !isProblem(response, status: 503, code: "upstream_unavailable") { failures.append("expected 503, got \(describe(response)) \(detail)") }
            if response.header("Retry-After") == nil { failures.append("no Retry-After") }
        case .kept(let statuses):
            if !statuses.contains(response.status ?? 0) || response.header("Content-Type") != "application/problem+json" {
                failures.append("expected a problem with status in \(statuses.sorted()), got \(describe(response)) \(detail)")
            }
        case .deleted:
            if !isProblem(response, status: 403, code: "upstream_unauthorized") {
                failures.append("expected 403 upstream_unauthorized (grant refused after the dead refresh token), got \(describe(response)) \(detail)")
            }
            if !after.isEmpty { failures.append("the token row rejected with invalid_grant is still stored") }
        }
        if case .deleted = expectation {} else if !unchanged {
            failures.append(after.isEmpty ? "the stored token was deleted" : "the stored token changed (\(after.count) row(s))")
        }
        return failures
    }
}
