/// What every exchange of a manager and of its side-request copies shares, like
/// an NSURLSession's configuration: the cookie jar, fixed headers (the SMP APPCID)
/// and TLS material. These are not request filters, because a side request runs
/// on a copy that has dropped the request filters already run, and it still needs
/// the session's cookies.
public struct SessionConfiguration: Sendable {
    public var cookieJar: (any CookieStorage)?
    public var headers: HeaderFields
    public var tls: TLSOptions
    public var timeouts: Timeouts

    public init(
        cookieJar: (any CookieStorage)? = nil, headers: HeaderFields = [:], tls: TLSOptions = TLSOptions(),
        timeouts: Timeouts = Timeouts()
    ) {
        self.cookieJar = cookieJar
        self.headers = headers
        self.tls = tls
        self.timeouts = timeouts
    }
}

/// A registration's upstream cookies. Implementations apply RFC 6265 matching.
public protocol CookieStorage: Sendable {
    /// The `Cookie` header value for a request to `url`, or nil when none match.
    func cookieHeader(for url: String) async throws -> String?
    /// Stores the `Set-Cookie` values a response to `url` carried.
    func store(setCookies: [String], from url: String) async throws
}
