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
        tokens.withLock { $0.removeAll { $0.hasPrefix(registrationID + "|") } }
    }
}

private enum CSRFRefetched: ConversationContextKey { typealias Value = Bool }

/// SAP CSRF protection: before a modifying request, fetch a token with
/// `X-CSRF-Token: Fetch` (a side request through the manager copy, so it carries
/// the session's cookies), cache it per registration and origin, and send it.
/// On `403` with `X-CSRF-Token: Required`, forget it, refetch once and retry.
public struct CSRFFilter: RequestFilter, ResponseFilter {
    static let safeMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE"]
    let registrationID: String
    let cache: CSRFTokenCache

    public init(registrationID: String, cache: CSRFTokenCache) {
        self.registrationID = registrationID
        self.cache = cache
    }

    public func prepare(_ request: inout UpstreamRequest, conversation: Conversation) async throws -> RequestDecision {
        guard !Self.safeMethods.contains(request.method.uppercased()), let origin = URLParts(request.url)?.origin else {
            return .proceed
        }
        let key = registrationID + "|" + origin
        if let token = cache.token(for: key) {
            request.headers.set("X-CSRF-Token", token)
            return .proceed
        }
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
        return .proceed
    }

    public func inspect(_ response: inout UpstreamResponse, request: UpstreamRequest, conversation: Conversation) async throws
        -> ResponseDecision
    {
        guard response.status == 403, response.headers["X-CSRF-Token"]?.lowercased() == "required",
            conversation[CSRFRefetched.self] != true, let origin = URLParts(request.url)?.origin
        else { return .deliver }
        conversation[CSRFRefetched.self] = true
        cache.set(nil, for: registrationID + "|" + origin)
        return .restart(reason: .csrfTokenRequired)
    }
}
