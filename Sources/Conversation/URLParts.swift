/// An absolute http(s) URL split into the parts Parley reasons about. Parsing is
/// strict: anything that is not `scheme://host[:port][/path][?query]` is nil.
public struct URLParts: Sendable, Equatable {
    public let scheme: String
    public let host: String
    public let port: Int?
    /// The raw (still percent-encoded) path, starting with `/`, or empty.
    public let path: String
    /// The raw query without `?`, or nil.
    public let query: String?

    public init?(_ url: String) {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { return nil }
        var rest = url[schemeEnd.upperBound...]
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        guard !authority.isEmpty, !authority.contains("@"), !authority.contains("\\") else { return nil }
        var host = Substring(authority)
        var port: Int?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") {
                guard let p = Int(after.dropFirst()), (1...65535).contains(p) else { return nil }
                port = p
            } else if !after.isEmpty {
                return nil
            }
            host = host[...close]
        } else if let colon = host.lastIndex(of: ":") {
            guard let p = Int(host[host.index(after: colon)...]), (1...65535).contains(p) else { return nil }
            port = p
            host = host[..<colon]
        }
        guard !host.isEmpty else { return nil }
        let tail = rest[authorityEnd...]
        let queryStart = tail.firstIndex(of: "?")
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        self.path = String(tail[..<(queryStart ?? tail.endIndex)])
        self.query = queryStart.map { String(tail[tail.index(after: $0)...]) }
    }

    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    /// `scheme://host[:port]`, with the default port left out.
    public var origin: String {
        let defaultPort = scheme == "https" ? 443 : 80
        if let port, port != defaultPort { return "\(scheme)://\(host):\(port)" }
        return "\(scheme)://\(host)"
    }

    public var isSecure: Bool { scheme == "https" }

    /// The path, or `/` when empty.
    public var pathOrRoot: String { path.isEmpty ? "/" : path }
}

extension URLParts {
    /// Resolves a `Location`-style reference against an absolute base (RFC 3986 §5.2,
    /// without dot-segment removal): absolute URLs, `//authority…`, `/path…`, `?query`
    /// and relative paths. Nil when the result is not an absolute http(s) URL or the
    /// reference carries control characters.
    public static func resolve(_ reference: String, against base: String) -> String? {
        guard !reference.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }), let b = URLParts(base) else {
            return nil
        }
        let resolved: String
        if reference.range(of: "://") != nil, let colon = reference.firstIndex(of: ":"),
            !reference[..<colon].contains("/"), !reference[..<colon].contains("?")
        {
            resolved = reference
        } else if reference.hasPrefix("//") {
            resolved = b.scheme + ":" + reference
        } else if reference.hasPrefix("/") {
            resolved = b.origin + reference
        } else if reference.hasPrefix("?") {
            resolved = b.origin + b.pathOrRoot + reference
        } else {
            let directory = b.pathOrRoot[..<(b.pathOrRoot.lastIndex(of: "/").map { b.pathOrRoot.index(after: $0) } ?? b.pathOrRoot.endIndex)]
            resolved = b.origin + directory + reference
        }
        return URLParts(resolved) == nil ? nil : resolved
    }
}
