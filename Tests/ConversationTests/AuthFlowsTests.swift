@testable import AuthFlows
import Conversation
import Foundation
import ParleyTesting
import Synchronization
import Testing

/// In-memory `CookieRecords` for filter tests; the PostgreSQL one is tested end to end.
final class MemoryCookieRecords: CookieRecords {
    let store = Mutex<[String: [StoredCookie]]>([:])
    func cookies(registrationID: String) async throws -> [StoredCookie] { store.withLock { $0[registrationID] ?? [] } }
    func apply(registrationID: String, store add: [StoredCookie], delete: [(name: String, domain: String, path: String)]) async throws {
        store.withLock { all in
            var jar = all[registrationID] ?? []
            for d in delete { jar.removeAll { $0.name == d.name && $0.domain == d.domain && $0.path == d.path } }
            for c in add {
                jar.removeAll { $0.name == c.name && $0.domain == c.domain && $0.path == c.path }
                jar.append(c)
            }
            all[registrationID] = jar
        }
    }
}

@Suite struct CookieTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let url = URLParts("https://app.smp.example/odata/v1/Items")!

    func stored(_ header: String, from url: URLParts? = nil) -> StoredCookie? {
        if case .store(let c) = Cookies.parse(header, from: url ?? self.url, at: now) { return c }
        return nil
    }

    @Test func defaultsAreHostOnlyWithTheDefaultPath() throws {
        let c = try #require(stored("JSESSIONID=abc; HttpOnly"))
        #expect(c.hostOnly && c.domain == "app.smp.example" && c.path == "/odata/v1" && c.httpOnly && c.expiresAt == nil)
        #expect(c.matches(URLParts("https://app.smp.example/odata/v1/Other")!, at: now))
        #expect(!c.matches(URLParts("https://app.smp.example/odata/v2")!, at: now))
        #expect(!c.matches(URLParts("https://sub.app.smp.example/odata/v1/x")!, at: now))
    }

    @Test func domainAttributeMustMatchTheHost() throws {
        let c = try #require(stored("a=1; Domain=.smp.example; Path=/"))
        #expect(!c.hostOnly && c.domain == "smp.example")
        #expect(c.matches(URLParts("https://other.smp.example/x")!, at: now))
        #expect(!c.matches(URLParts("https://evilsmp.example/x")!, at: now))
        #expect(stored("a=1; Domain=evil.example") == nil)
    }

    @Test func secureCookiesOnlyTravelOverHTTPS() throws {
        let c = try #require(stored("s=1; Secure; Path=/"))
        #expect(!c.matches(URLParts("http://app.smp.example/")!, at: now))
        #expect(stored("s=1; Secure", from: URLParts("http://app.smp.example/")!) == nil)
    }

    @Test func expiryAndDeletion() throws {
        let c = try #require(stored("m=1; Max-Age=60; Path=/"))
        #expect(c.matches(url, at: now.addingTimeInterval(59)))
        #expect(!c.matches(url, at: now.addingTimeInterval(61)))
        #expect(Cookies.parse("m=; Max-Age=0; Path=/", from: url, at: now) == .delete(name: "m", domain: "app.smp.example", path: "/"))
        let e = try #require(stored("e=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/"))
        #expect(e.expiresAt != nil && e.expiresAt! > now)
    }

    @Test func pathMatchingFollowsRFC6265() {
        #expect(Cookies.pathMatches(requestPath: "/a/b", cookiePath: "/a"))
        #expect(Cookies.pathMatches(requestPath: "/a/b", cookiePath: "/a/"))
        #expect(!Cookies.pathMatches(requestPath: "/ab", cookiePath: "/a"))
    }

    @Test func headerPutsLongerPathsFirst() throws {
        let cookies = [try #require(stored("a=1; Path=/")), try #require(stored("b=2; Path=/odata"))]
        #expect(Cookies.header(for: url, from: cookies, at: now) == "b=2; a=1")
    }

    /// The index answers as `Cookies.header` does, for every host, scheme and path it is
    /// asked about, and again once its first cookie has expired.
    @Test func theJarIndexAnswersAsTheMatchWouldAndHonoursExpiry() throws {
        let base = try #require(URLParts("https://app.smp.example/odata/x"))
        var cookies = try (1...20).map { i in try #require(stored("c\(i)=v\(i); Path=\(i % 3 == 0 ? "/odata" : "/")", from: base)) }
        cookies.append(try #require(stored("s=1; Path=/; Secure; Max-Age=60", from: base)))
        cookies.append(try #require(stored("d=1; Path=/sp; Domain=smp.example", from: base)))
        let index = CookieJarIndex(cookies)
        let urls = [
            "https://app.smp.example/odata/x", "https://app.smp.example/odata", "https://app.smp.example/odatax",
            "http://app.smp.example/odata/y", "https://app.smp.example/", "https://app.smp.example/sp/a", "https://other.smp.example/sp",
            "https://elsewhere.example/odata/x",
        ]
        for _ in 0..<2 {  // the second round answers from what the first remembered
            for text in urls {
                let url = try #require(URLParts(text))
                #expect(index.header(for: url, at: now) == Cookies.header(for: url, from: cookies, at: now), "\(text)")
            }
        }
        // More hosts than it remembers headers for: the memory starts over, the answers stay right.
        for _ in 0..<2 {
            for host in 1...20 {
                let url = try #require(URLParts("https://h\(host).smp.example/sp/a"))
                #expect(index.header(for: url, at: now) == Cookies.header(for: url, from: cookies, at: now), "h\(host)")
            }
        }
        let later = now.addingTimeInterval(61)
        let header = index.header(for: base, at: later)
        #expect(header == Cookies.header(for: base, from: cookies, at: later))
        #expect(header?.contains("s=1") == false && index.header(for: base, at: now)?.contains("s=1") == true)
        #expect(CookieJarIndex.empty.header(for: base, at: now) == nil && CookieJarIndex.empty.cookies.isEmpty)
    }

    /// What caches keep is made to its length (`compacted`); the text is the same, ASCII or not.
    @Test func aCompactedStringIsTheSameText() {
        for text in ["", "n=1", "costs|2f1c7c9e-8d1b-4a4e-9a51-3c8f0e6b2d71|", String(repeating: "é", count: 40) + "|x"] {
            #expect(text.compacted == text && text.compacted.utf8.count == text.utf8.count)
        }
    }

    @Test func jarStoresAndServesThroughRecords() async throws {
        let records = MemoryCookieRecords()
        let jar = RegistrationCookieJar(registrationID: "r1", records: records, clock: TestClock(now))
        try await jar.store(setCookies: ["a=1; Path=/", "b=2; Path=/; Domain=smp.example"], from: "https://app.smp.example/x")
        #expect(try await jar.cookieHeader(for: "https://app.smp.example/y") == "a=1; b=2")
        #expect(try await jar.cookieHeader(for: "https://elsewhere.example/") == nil)
        try await jar.store(setCookies: ["a=gone; Max-Age=0; Path=/"], from: "https://app.smp.example/x")
        #expect(try await jar.cookieHeader(for: "https://app.smp.example/y") == "b=2")
        let other = RegistrationCookieJar(registrationID: "r2", records: records, clock: TestClock(now))
        #expect(try await other.cookieHeader(for: "https://app.smp.example/y") == nil)
    }
}

@Suite struct CSRFTests {
    /// An upstream that wants a CSRF token for POST, tied to its session cookie.
    static func upstream(fetches: Mutex<Int>.Box, token: Mutex<String>.Box) -> FakeTransport {
        FakeTransport { request in
            if request.headers["X-CSRF-Token"] == "Fetch" {
                fetches.value.withLock { $0 += 1 }
                return .text(200, headers: ["X-CSRF-Token": token.value.withLock { $0 }, "Set-Cookie": "sess=1; Path=/"])
            }
            if request.method == "POST" {
                guard request.headers["Cookie"] == "sess=1", request.headers["X-CSRF-Token"] == token.value.withLock({ $0 })
                else { return .text(403, "csrf", headers: ["X-CSRF-Token": "Required"]) }
                return .text(201, "created")
            }
            return .text(200)
        }
    }

    func manager(_ transport: FakeTransport, cache: CSRFTokenCache, registrationID: String = "r1") -> ConversationManager {
        let configurator = DestinationConfigurator(
            transport: transport, cookieRecords: MemoryCookieRecords(), csrfTokens: cache, clock: TestClock(),
            logger: .init(label: "test"))
        let destination = try! DestinationSpec(name: "smp", url: "https://smp.example", csrf: true).validated()
        return configurator.makeManager(for: destination, registration: RegistrationMaterial(registrationID: registrationID))
    }

    /// The cache holds at most its capacity (a churn of registrations cannot grow it without
    /// end) and forgets a token unused for its idle lifetime; a forgotten token is fetched again.
    @Test func theTokenCacheIsBoundedAndAgesOut() async throws {
        let fetches = Mutex<Int>.Box(0)
        let transport = Self.upstream(fetches: fetches, token: Mutex<String>.Box("t1"))
        let clock = TestClock()
        let cache = CSRFTokenCache(capacity: 10, idleLifetime: .seconds(60), clock: clock)
        var last: ConversationManager?
        for n in 0..<100 {
            let m = manager(transport, cache: cache, registrationID: "r\(n)")
            last = m
            guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
            else { Issue.record("no response"); return }
            #expect(r.status == 201)
            #expect(cache.count <= 10)
            clock.advance(by: .milliseconds(10))
        }
        #expect(fetches.value.withLock { $0 } == 100)
        // The most recent registration's token is still there; an hour later it is not.
        let recent = try #require(last)
        _ = try await recent.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        #expect(fetches.value.withLock { $0 } == 100)
        clock.advance(by: .seconds(61))
        _ = try await recent.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        #expect(fetches.value.withLock { $0 } == 101)
    }

    @Test func fetchesOnceThenReusesAndRefetchesWhenRequired() async throws {
        let fetches = Mutex<Int>.Box(0)
        let token = Mutex<String>.Box("t1")
        let transport = Self.upstream(fetches: fetches, token: token)
        let cache = CSRFTokenCache()
        let m = manager(transport, cache: cache)
        for _ in 0..<2 {
            guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
            else { Issue.record("no response"); return }
            #expect(r.status == 201)
        }
        #expect(fetches.value.withLock { $0 } == 1)
        token.value.withLock { $0 = "t2" }  // the upstream rotated its token
        guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        else { Issue.record("no response"); return }
        #expect(r.status == 201)
        #expect(fetches.value.withLock { $0 } == 2)
        // GETs never fetch.
        _ = try await m.execute(UpstreamRequest(method: "GET", url: "https://smp.example/Items"))
        #expect(fetches.value.withLock { $0 } == 2)
    }

    /// An upstream whose session ends under the first `moves` modifying requests (another
    /// instance's conversation signed in anew): each is refused `403 Required` with the next
    /// session's cookie. A token belongs to the session it was fetched in.
    static func movingSession(moves: Int, fetches: Mutex<Int>.Box) -> FakeTransport {
        let state = Mutex<(session: Int, moved: Int)>.Box((1, 0))
        return FakeTransport { request in
            if request.headers["X-CSRF-Token"] == "Fetch" {
                fetches.value.withLock { $0 += 1 }
                let session = state.value.withLock { $0.session }
                return .text(200, headers: ["X-CSRF-Token": "t-s\(session)", "Set-Cookie": "sess=s\(session); Path=/"])
            }
            guard request.method == "POST" else { return .text(200) }
            let answer = state.value.withLock { state -> (Int, String?) in
                let current = "s\(state.session)"
                if state.moved < moves {
                    state.moved += 1
                    state.session += 1
                    return (403, "sess=s\(state.session); Path=/")
                }
                let good = request.headers["Cookie"] == "sess=\(current)" && request.headers["X-CSRF-Token"] == "t-\(current)"
                return (good ? 201 : 403, nil)
            }
            switch (answer.0, answer.1) {
            case (403, let cookie?): return .text(403, headers: ["X-CSRF-Token": "Required", "Set-Cookie": cookie])
            case (403, nil): return .text(403, headers: ["X-CSRF-Token": "Required"])
            default: return .text(answer.0)
            }
        }
    }

    /// A token fetched in one session met the next one's cookie twice in a row: each time the
    /// session moved under the attempt, so the token is fetched again (seen in a one-hour soak:
    /// 403 bursts when the upstream ended a shared session and three instances signed in anew).
    @Test func refetchesAgainWhileTheSessionMovesUnderTheAttempt() async throws {
        let fetches = Mutex<Int>.Box(0)
        let m = manager(Self.movingSession(moves: 2, fetches: fetches), cache: CSRFTokenCache())
        guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        else { Issue.record("no response"); return }
        #expect(r.status == 201)
        #expect(fetches.value.withLock { $0 } == 3)
    }

    /// A session that never settles costs at most three refetches.
    @Test func refetchesAtMostThreeTimes() async throws {
        let fetches = Mutex<Int>.Box(0)
        let m = manager(Self.movingSession(moves: 100, fetches: fetches), cache: CSRFTokenCache())
        guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        else { Issue.record("no response"); return }
        #expect(r.status == 403)
        #expect(fetches.value.withLock { $0 } == 4)
    }

    /// Plants a stale token in the cache whenever a conversation restarts for a CSRF refusal:
    /// another conversation of the registration, on this instance, that fetched a token in a
    /// session that has ended since.
    struct StaleTokenPlanter: ConversationObserver {
        let cache: CSRFTokenCache
        func observe(_ event: ConversationEvent, conversation: Conversation) {
            if case .restarting(reason: .csrfTokenRequired) = event { cache.set("stale", for: "r1|https://smp.example") }
        }
    }

    /// The attempt after a refusal fetches its own token: the cached one may belong to a session
    /// that has ended (one 403 in a one-hour soak: the retry took such a token, met the same
    /// cookie it had noted, and handed the 403 on).
    @Test func theAttemptAfterARefusalFetchesItsOwnToken() async throws {
        let fetches = Mutex<Int>.Box(0)
        let transport = FakeTransport { request in
            if request.headers["X-CSRF-Token"] == "Fetch" {
                fetches.value.withLock { $0 += 1 }
                return .text(200, headers: ["X-CSRF-Token": "good"])
            }
            guard request.method == "POST", request.headers["X-CSRF-Token"] == "good" else {
                return .text(403, headers: ["X-CSRF-Token": "Required"])
            }
            return .text(201)
        }
        let cache = CSRFTokenCache()
        cache.set("stale", for: "r1|https://smp.example")
        let configurator = DestinationConfigurator(
            transport: transport, cookieRecords: MemoryCookieRecords(), csrfTokens: cache, clock: TestClock(),
            observers: [StaleTokenPlanter(cache: cache)], logger: .init(label: "test"))
        let destination = try DestinationSpec(name: "smp", url: "https://smp.example", csrf: true).validated()
        let m = configurator.makeManager(for: destination, registration: RegistrationMaterial(registrationID: "r1"))
        guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        else { Issue.record("no response"); return }
        #expect(r.status == 201)
        #expect(fetches.value.withLock { $0 } == 1)
    }

    /// An upstream that refuses every token, with the session unchanged, costs one refetch.
    @Test func refetchesOnlyOncePerConversation() async throws {
        let fetches = Mutex<Int>.Box(0)
        let transport = FakeTransport { request in
            if request.headers["X-CSRF-Token"] == "Fetch" {
                fetches.value.withLock { $0 += 1 }
                return .text(200, headers: ["X-CSRF-Token": "never-good"])
            }
            return .text(403, headers: ["X-CSRF-Token": "Required"])
        }
        let m = manager(transport, cache: CSRFTokenCache())
        guard case .response(let r) = try await m.execute(UpstreamRequest(method: "POST", url: "https://smp.example/Items"))
        else { Issue.record("no response"); return }
        #expect(r.status == 403)
        #expect(fetches.value.withLock { $0 } == 2)
    }
}
