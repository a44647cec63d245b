public import Conversation
import Synchronization

/// SAP CSRF tokens per registration and origin, kept in memory only: they are
/// upstream secrets tied to the upstream session and are never shown to anyone. Bounded:
/// at most `capacity` tokens, each forgotten after `idleLifetime` unused (a forgotten one is
/// fetched again before the next modifying request, as after a `403 Required`).
public final class CSRFTokenCache: Sendable {
    private let tokens: Mutex<BoundedMap<String, String>>
    private let clock: any WallClock

    public static let defaultCapacity = 50_000

    public init(capacity: Int = CSRFTokenCache.defaultCapacity, idleLifetime: Duration = .seconds(3600), clock: any WallClock = SystemClock()) {
        tokens = Mutex(BoundedMap(capacity: capacity, idleLifetime: idleLifetime))
        self.clock = clock
    }

    /// How many tokens are held.
    public var count: Int { tokens.withLock { $0.count } }

    func token(for key: String) -> String? {
        let now = clock.now
        return tokens.withLock { $0.value(for: key, now: now) }
    }

    func set(_ token: String?, for key: String) {
        let now = clock.now
        tokens.withLock { $0.set(token, for: key, now: now) }
    }

    /// Forgets every token (a lost cache signal).
    public func forgetAll() { tokens.withLock { $0.removeAll() } }

    /// Forgets every token of a registration.
    public func forget(registrationID: String) {
        let prefix = registrationID + "|"
        tokens.withLock { $0.removeAll { $0.hasPrefix(prefix) } }
    }
}

/// How often this conversation fetched a token again after a `403 Required`.
private enum CSRFRefetches: ConversationContextKey { typealias Value = Int }
/// The session's `Cookie` header when the attempt after a refetch began to fetch its token ("" for none).
private enum CSRFSessionAtFetch: ConversationContextKey { typealias Value = String }

/// SAP CSRF protection: before a modifying request, fetch a token with
/// `X-CSRF-Token: Fetch` (a side request through the manager copy, so it carries
/// the session's cookies), cache it per registration and origin, and send it.
/// On `403` with `X-CSRF-Token: Required`, forget it, refetch and retry: once, and again
/// (at most `maxRefetches` times) only while the session's cookies changed under the
/// attempt. The attempt after a refusal fetches its own token rather than take the cached one. A token belongs to the upstream session, and a registration's session is shared
/// by every instance: when it ends, concurrent conversations each sign in anew, and a token
/// fetched in one session can meet the next one's cookie. An upstream that never accepts a
/// token still costs one refetch.
public struct CSRFFilter: RequestFilter, ResponseFilter {
    static let safeMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE"]
    static let maxRefetches = 3
    let cache: CSRFTokenCache

    /// One filter serves every registration of a destination: a token is filed under the
    /// conversation's party (its registration) and the origin.
    public init(cache: CSRFTokenCache) {
        self.cache = cache
    }

    private func key(_ origin: String, conversation: Conversation) -> String { (conversation.party?.id ?? "") + "|" + origin }

    public func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
        guard !Self.safeMethods.contains(request.method.uppercased()), let origin = URLParts(request.url)?.origin else {
            return .proceed
        }
        let key = key(origin, conversation: conversation)
        // After a refusal the token is fetched in this attempt, never taken from the cache: another
        // conversation may have cached one of a session that has ended since. The session's
        // cookies are noted before the fetch, so that a change during the fetch or the send counts.
        let refetching = conversation[CSRFRefetches.self] != nil
        if refetching { conversation[CSRFSessionAtFetch.self] = try await sessionCookies(request.url, conversation: conversation) }
        if !refetching, let token = cache.token(for: key) {
            request.headers.set("X-CSRF-Token", token)
        } else {
            var fetch = UpstreamRequest(method: "GET", url: request.url, tls: request.tls, timeouts: request.timeouts)
            fetch.headers.set("X-CSRF-Token", "Fetch")
            if let appcid = request.headers["X-SMP-APPCID"] { fetch.headers.set("X-SMP-APPCID", appcid) }
            if let authorization = request.headers["Authorization"] { fetch.headers.set("Authorization", authorization) }
            if case .response(let response) = try await conversation.manager.execute(fetch, id: conversation.id + ".csrf") {
                response.body.discard()
                if let token = response.headers["X-CSRF-Token"], token.lowercased() != "required" {
                    cache.set(token, for: key)
                    request.headers.set("X-CSRF-Token", token)
                }
            }
        }
        return .proceed
    }

    public func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        let refetches = conversation[CSRFRefetches.self] ?? 0
        guard response.status == 403, response.headers["X-CSRF-Token"]?.lowercased() == "required",
            refetches < Self.maxRefetches, let origin = URLParts(request.url)?.origin
        else { return .deliver }
        if refetches > 0 {
            let now = try await sessionCookies(request.url, conversation: conversation)
            guard now != conversation[CSRFSessionAtFetch.self] else { return .deliver }
        }
        conversation[CSRFRefetches.self] = refetches + 1
        cache.set(nil, for: key(origin, conversation: conversation))
        return .restart(reason: .csrfTokenRequired)
    }

    private func sessionCookies(_ url: String, conversation: Conversation) async throws -> String {
        try await conversation.manager.session.cookieJar?.cookieHeader(for: url) ?? ""
    }
}
