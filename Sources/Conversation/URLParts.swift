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
        // On UTF-8 bytes, without Foundation: this runs several times per proxied request.
        let bytes = url.utf8
        guard let schemeEnd = Self.find(bytes, "://") else { return nil }
        let scheme = Self.asciiLowercased(bytes[bytes.startIndex..<schemeEnd])
        guard scheme == "http" || scheme == "https" else { return nil }
        var rest = bytes[bytes.index(schemeEnd, offsetBy: 3)...]
        if let hash = rest.firstIndex(of: UInt8(ascii: "#")) { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        guard !authority.isEmpty, !authority.contains(UInt8(ascii: "@")), !authority.contains(UInt8(ascii: "\\")) else { return nil }
        var host = authority
        var port: Int?
        if host.first == UInt8(ascii: "[") {
            guard let close = host.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            let after = host[host.index(after: close)...]
            if after.first == UInt8(ascii: ":") {
                guard let p = Self.port(after.dropFirst()) else { return nil }
                port = p
            } else if !after.isEmpty {
                return nil
            }
            host = host[...close]
        } else if let colon = host.lastIndex(of: UInt8(ascii: ":")) {
            guard let p = Self.port(host[host.index(after: colon)...]) else { return nil }
            port = p
            host = host[..<colon]
        }
        guard !host.isEmpty else { return nil }
        let tail = rest[authorityEnd...]
        let queryStart = tail.firstIndex(of: UInt8(ascii: "?"))
        self.scheme = scheme
        self.host = Self.asciiLowercased(host)
        self.port = port
        self.path = String(Substring(tail[..<(queryStart ?? tail.endIndex)])) 
        self.query = queryStart.map { String(Substring(tail[tail.index(after: $0)...])) }
    }

    /// The first place `needle` (ASCII) starts in `bytes`.
    private static func find(_ bytes: String.UTF8View, _ needle: StaticString) -> String.UTF8View.Index? {
        let n = needle.utf8CodeUnitCount
        return needle.withUTF8Buffer { pattern -> String.UTF8View.Index? in
            var i = bytes.startIndex
            while i != bytes.endIndex {
                var j = i
                var k = 0
                while k < n, j != bytes.endIndex, bytes[j] == pattern[k] {
                    j = bytes.index(after: j)
                    k += 1
                }
                if k == n { return i }
                i = bytes.index(after: i)
            }
            return nil
        }
    }

    /// 1 to 5 decimal digits in 1...65535.
    private static func port(_ digits: Substring.UTF8View) -> Int? {
        guard !digits.isEmpty, digits.count <= 5 else { return nil }
        var value = 0
        for c in digits {
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(c - UInt8(ascii: "0"))
        }
        return (1...65535).contains(value) ? value : nil
    }

    private static func asciiLowercased(_ bytes: Substring.UTF8View) -> String {
        if !bytes.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) { return String(Substring(bytes)) }
        return String(decoding: bytes.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 + 32 : $0 }, as: UTF8.self)
    }

    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    /// `scheme://host[:port]`, with the default port left out.
    public var origin: String {
        let defaultPort = scheme == "https" ? 443 : 80
        if let port, port != defaultPort { return "\(scheme)://\(host):\(port)" }
        return "\(scheme)://\(host)"
    }

    public var isSecure: Bool { scheme == "https" }

    /// Whether the host is this machine by name or address (`127.0.0.1`, `localhost`, `[::1]`):
    /// where plain http is allowed, since nothing crosses a network.
    public var isLoopback: Bool { host == "127.0.0.1" || host == "localhost" || host == "[::1]" }

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
