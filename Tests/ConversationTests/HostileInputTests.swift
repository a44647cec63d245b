import AuthFlows
import Conversation
import Foundation
import Testing

/// The parsers that read an upstream's, an authorization server's or a cookie's bytes:
/// every answer is a value, never a trap.
@Suite struct ResponseHeadParserTests {
    static func parse(_ text: String, limits: ResponseHeadParser.Limits = .init()) -> ResponseHeadParser.Step {
        var parser = ResponseHeadParser(limits: limits)
        var last = ResponseHeadParser.Step.needMore
        // By bytes: "\r\n" is one Character to String.split.
        for line in Array(text.utf8).split(separator: 0x0A, omittingEmptySubsequences: false).dropLast() {
            last = parser.feed(line: Array(line) + [0x0A])
            if case .head = last { return last }
            if case .failed = last { return last }
        }
        return last
    }

    static func status(_ text: String) -> Int? {
        if case .head(let status, _) = parse(text) { return status }
        return nil
    }

    static func failed(_ text: String) -> Bool {
        if case .failed = parse(text) { return true }
        return false
    }

    @Test func aPlainHeadIsRead() {
        guard case .head(let status, let headers) = Self.parse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A:  b \r\n\r\n") else {
            Issue.record("not a head")
            return
        }
        #expect(status == 200)
        #expect(headers["content-type"] == "text/plain")
        #expect(headers["X-A"] == "b")
        #expect(Self.status("HTTP/2 204\r\n\r\n") == 204)
        #expect(Self.status("HTTP/1.0 599 Whatever it says\r\n\r\n") == 599)
    }

    @Test func interimBlocksPrecedeTheFinalOne() {
        var parser = ResponseHeadParser()
        var steps: [String] = []
        for line in ["HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 103 Early Hints\r\n", "Link: </a>\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "\r\n"] {
            switch parser.feed(line: Array(line.utf8)) {
            case .needMore: steps.append("more")
            case .interim: steps.append("interim")
            case .head(let status, let headers): steps.append("head \(status) \(headers.count)")
            case .failed(let reason): steps.append("failed \(reason)")
            }
        }
        #expect(steps == ["more", "interim", "more", "more", "interim", "more", "head 200 0"])
    }

    @Test(arguments: [
        "HTTP/1.1 99 Low\r\n\r\n", "HTTP/1.1 600 High\r\n\r\n", "HTTP/1.1 99999999999999999999 Big\r\n\r\n", "HTTP/1.1 -200 Neg\r\n\r\n",
        "HTTP/1.1 2000 Four\r\n\r\n", "HTTP/1.1 20 Two\r\n\r\n", "HTTP/1.1 abc\r\n\r\n", "HTTP/1.1\r\n\r\n", "HTTP/1.1  200 Two spaces\r\n\r\n",
        "hello\r\n\r\n", "ICY 200 OK\r\n\r\n", "HTTP/x.1 200 OK\r\n\r\n", "\r\n", "HTTP/1.1 200OK\r\n\r\n",
    ])
    func statusLinesOutsideTheGrammarFail(_ text: String) {
        #expect(Self.failed(text), "\(text.debugDescription)")
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nFoo : bar\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: nameless\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\u{0}b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
        "HTTP/1.1 200 OK\r\n continuation first\r\n\r\n",
    ])
    func brokenFramingAndFieldsFail(_ text: String) {
        #expect(Self.failed(text), "\(text.debugDescription)")
    }

    @Test func agreeingLengthsAndFoldedValuesPass() {
        #expect(Self.status("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n") == 200)
        guard case .head(_, let headers) = Self.parse("HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\n\r\n") else {
            Issue.record("not a head")
            return
        }
        #expect(headers["X-Long"] == "a b")
    }

    @Test func floodsAndOversizedHeadsFail() {
        let many = "HTTP/1.1 200 OK\r\n" + (0..<300).map { "X-\($0): v\r\n" }.joined() + "\r\n"
        #expect(Self.failed(many))
        let big = "HTTP/1.1 200 OK\r\nX-Big: " + String(repeating: "a", count: 70 * 1024) + "\r\n\r\n"
        #expect(Self.failed(big))
        let interims = (0..<20).map { _ in "HTTP/1.1 100 Continue\r\n\r\n" }.joined() + "HTTP/1.1 200 OK\r\n\r\n"
        #expect(Self.failed(interims))
    }

    @Test func arbitraryBytesNeverTrap() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var parser = ResponseHeadParser()
            for _ in 0..<8 {
                let line = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                _ = parser.feed(line: line)
            }
        }
    }
}

@Suite struct TokenResponseTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func parse(_ body: String, status: Int = 200, retryAfter: String? = nil, previous: String? = nil) -> TokenEndpointOutcome {
        TokenResponse.parse(status: status, retryAfter: retryAfter, body: Array(body.utf8), now: now, previousRefreshToken: previous)
    }

    static func isMalformed(_ outcome: TokenEndpointOutcome) -> Bool {
        if case .malformed = outcome { return true }
        return false
    }

    @Test func aGoodAnswerIsAToken() {
        let outcome = Self.parse(#"{"access_token":"at","token_type":"bearer","expires_in":3600,"refresh_token":"rt","scope":"a b"}"#)
        #expect(
            outcome
                == .token(
                    StoredToken(
                        accessToken: "at", refreshToken: "rt", tokenType: "Bearer", scopes: "a b", expiresAt: Self.now.addingTimeInterval(3600))))
        // A quoted lifetime is read; the previous refresh token is kept when none is issued.
        guard case .token(let token) = Self.parse(#"{"access_token":"at","token_type":"Bearer","expires_in":"60"}"#, previous: "old") else {
            Issue.record("not a token")
            return
        }
        #expect(token.refreshToken == "old")
        #expect(token.expiresAt == Self.now.addingTimeInterval(60))
    }

    @Test(arguments: [
        #"{"access_token":"at","token_type":"Bearer"}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":-1}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":0}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":3600.5}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":1e300}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":99999999999}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":"abc"}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":"-5"}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":null}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":true}"#,
        #"{"access_token":"","token_type":"Bearer","expires_in":60}"#,
        #"{"access_token":"a\nb","token_type":"Bearer","expires_in":60}"#,
        #"{"access_token":5,"token_type":"Bearer","expires_in":60}"#,
        #"{"token_type":"Bearer","expires_in":60}"#,
        #"{"access_token":"at","token_type":"mac","expires_in":60}"#,
        #"{"access_token":"at","expires_in":60}"#,
        #"{"access_token":"at","token_type":"Bearer","expires_in":60,"refresh_token":""}"#,
        #"<html>blocked</html>"#, #"[]"#, #"{"access_token":"at""#, "", "null",
    ])
    func nonsenseIsMalformed(_ body: String) {
        #expect(Self.isMalformed(Self.parse(body)), "\(body)")
    }

    @Test func hugeTokensAreMalformed() {
        let huge = String(repeating: "a", count: TokenResponse.maxTokenBytes + 1)
        #expect(Self.isMalformed(Self.parse(#"{"access_token":"\#(huge)","token_type":"Bearer","expires_in":60}"#)))
    }

    /// The `id_token` is kept as sent for the callback that checks it; one that is not a string of
    /// token characters within the size limit counts as absent and never spoils the token.
    @Test func anIDTokenIsKeptAsSentOrCountsAsAbsent() {
        func idToken(_ member: String) -> String?? {
            guard case .token(let token) = Self.parse(#"{"access_token":"at","token_type":"Bearer","expires_in":60\#(member)}"#) else {
                return .none
            }
            return .some(token.idToken)
        }
        #expect(idToken(#","id_token":"aaa.bbb.ccc""#) == .some("aaa.bbb.ccc"))
        #expect(idToken("") == .some(nil))
        let huge = String(repeating: "a", count: TokenResponse.maxTokenBytes + 1)
        for member in [#","id_token":5"#, #","id_token":null"#, #","id_token":{"a":1}"#, #","id_token":"a\nb""#, #","id_token":"""#,
            #","id_token":"\#(huge)""#] {
            #expect(idToken(member) == .some(nil), "\(member.prefix(40))")
        }
    }

    @Test func errorsAreTriaged() {
        #expect(Self.parse(#"{"error":"invalid_grant"}"#, status: 400) == .invalidGrant)
        #expect(Self.parse(#"{"error":"invalid_client"}"#, status: 401) == .refused(error: "invalid_client"))
        #expect(Self.isMalformed(Self.parse("<html>WAF says no</html>", status: 403)))
        #expect(Self.parse("", status: 503, retryAfter: "7") == .transient(retryAfter: .seconds(7)))
        #expect(Self.parse("", status: 429, retryAfter: "99999999999999") == .transient(retryAfter: nil))
        #expect(Self.parse("", status: 429, retryAfter: "100000") == .transient(retryAfter: .seconds(3600)))
        // Only 429 and 503 say the request was not taken; any other 5xx (a gateway's 502 or 504
        // included) leaves open whether the server acted on it.
        for status in [500, 502, 504, 599] {
            #expect(Self.parse("<html>Gateway Time-out</html>", status: status) == .uncertain(retryAfter: nil, reason: "the token endpoint answered HTTP \(status)"), "\(status)")
        }
        #expect(Self.isMalformed(Self.parse("", status: 302)))
        #expect(Self.isMalformed(Self.parse("", status: 201)))
    }
}

@Suite struct CookieLimitTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let url = URLParts("https://api.example.com/a/b")!

    static func stored(_ header: String, url: URLParts = url) -> StoredCookie? {
        if case .store(let cookie) = Cookies.parse(header, from: url, at: now) { return cookie }
        return nil
    }

    @Test func publicSuffixesAndOtherHostsAreRefused() {
        #expect(Self.stored("a=1; Domain=com") == nil)
        #expect(Self.stored("a=1; Domain=.com") == nil)
        #expect(Self.stored("a=1; Domain=co.uk", url: URLParts("https://x.example.co.uk/")!) == nil)
        #expect(Self.stored("a=1; Domain=example.org") == nil)
        #expect(Self.stored("a=1; Domain=0.0.1", url: URLParts("http://127.0.0.1/")!) == nil)
        #expect(Self.stored("a=1; Domain=example.com")?.domain == "example.com")
        #expect(Self.stored("a=1; Domain=127.0.0.1", url: URLParts("http://127.0.0.1/")!)?.hostOnly == true)
    }

    @Test func lifetimesAreCappedAt400Days() {
        let cap = Self.now.addingTimeInterval(Cookies.maxLifetime)
        #expect(Self.stored("a=1; Max-Age=99999999999999999999")?.expiresAt == cap)
        #expect(Self.stored("a=1; Max-Age=\(Int.max)")?.expiresAt == cap)
        #expect(Self.stored("a=1; Expires=Fri, 31 Dec 9999 23:59:59 GMT")?.expiresAt == cap)
        #expect(Self.stored("a=1; Max-Age=60")?.expiresAt == Self.now.addingTimeInterval(60))
        if case .delete = Cookies.parse("a=1; Max-Age=-99999999999999999999", from: Self.url, at: Self.now) {} else {
            Issue.record("a negative Max-Age deletes")
        }
        #expect(Self.stored("a=1; Max-Age=12abc")?.expiresAt == nil)
    }

    @Test func expiresFollowsTheCookieDateAlgorithm() {
        func expires(_ text: String) -> Date? { Self.stored("a=1; Expires=\(text)")?.expiresAt }
        let expected = Date(timeIntervalSince1970: 1_814_930_400)  // 2027-07-07T03:20:00Z
        #expect(expires("Wed, 07 Jul 2027 03:20:00 GMT") == expected)
        #expect(expires("Wednesday, 07-Jul-27 03:20:00 GMT") == expected)
        #expect(expires("Wed Jul  7 03:20:00 2027") == expected)
        #expect(expires("07 jul 2027 3:20:0") == expected)
        // Not a date: the attribute is left out (a session cookie), never a trap.
        for nonsense in ["", "tomorrow", "31 Feb", "Wed, 07 Jul 1600 03:20:00 GMT", "Wed, 32 Jul 2027 03:20:00 GMT",
            "Wed, 07 Jul 2027 24:00:00 GMT", "Fri, 31 Dec 99999 23:59:59 GMT", "a\u{301}b, 07 Jul 2027", "\u{0}\u{0}:\u{0}"]
        {
            #expect(expires(nonsense) == nil, "\(nonsense)")
        }
    }

    @Test func theJarIsCapped() {
        func cookie(_ i: Int, size: Int = 1) -> StoredCookie {
            StoredCookie(
                name: "c\(i)", value: String(repeating: "v", count: size), domain: "api.example.com", path: "/", hostOnly: true, secure: false,
                httpOnly: false, expiresAt: nil)
        }
        let full = (0..<Cookies.maxCookies).map { cookie($0) }
        var admitted = Cookies.admit(store: [cookie(1000)], delete: [], existing: full, at: Self.now)
        #expect(admitted.store.isEmpty)
        // Replacing one that is there is always allowed; deleting makes room.
        admitted = Cookies.admit(store: [cookie(3, size: 10)], delete: [], existing: full, at: Self.now)
        #expect(admitted.store.count == 1)
        admitted = Cookies.admit(store: [cookie(1000)], delete: [("c0", "api.example.com", "/")], existing: full, at: Self.now)
        #expect(admitted.store.count == 1)
        // Expired cookies go first.
        var expired = full
        expired[0].expiresAt = Self.now.addingTimeInterval(-1)
        admitted = Cookies.admit(store: [cookie(1000)], delete: [], existing: expired, at: Self.now)
        #expect(admitted.store.count == 1)
        #expect(admitted.delete.contains { $0.name == "c0" })
        // Bytes: a jar of 40 cookies of 4000 bytes passes 128 KiB.
        let big = (0..<40).map { cookie($0, size: 4000) }
        admitted = Cookies.admit(store: big, delete: [], existing: [], at: Self.now)
        #expect(admitted.store.count == Cookies.maxJarBytes / 4003)
        // One response setting a thousand cookies.
        admitted = Cookies.admit(store: (0..<1000).map { cookie($0) }, delete: [], existing: [], at: Self.now)
        #expect(admitted.store.count == Cookies.maxCookies)
    }
}

@Suite struct ReturnURLTests {
    @Test func aStarMatchesOnlyAtABoundary() throws {
        let destination = try DestinationSpec(
            name: "d", url: "https://api.example", allowedReturnUrls: ["https://app.example/cb*", "myapp://done", "https://host.example*"]
        ).validated()
        for allowed in ["https://app.example/cb", "https://app.example/cb/1", "https://app.example/cb?x=1", "https://app.example/cb#f", "myapp://done",
            "https://host.example", "https://host.example/x"]
        {
            #expect(destination.allowsReturnURL(allowed), "\(allowed)")
        }
        for refused in ["https://app.example/cbx", "https://app.example/cb.evil", "myapp://done/x", "https://host.example.evil.test",
            "https://host.example@evil.test", "https://host.example:8443"]
        {
            #expect(!destination.allowsReturnURL(refused), "\(refused)")
        }
    }
}
