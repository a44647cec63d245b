public import Conversation

/// The two address spaces of an upstream seen through a reverse proxy: the browser's
/// (`https://parley.example/pfx/web/sp`) and the upstream's own (`https://sp.internal/base`).
///
/// An upstream that honours `X-Forwarded-Host`/`-Prefix` answers in the browser's space: its
/// `Location`s name the public host and prefix, and it scopes cookies with `Domain=` the public
/// host and `Path=` under the prefix. Parley stores and follows them in the upstream's space,
/// so they are mapped back first, as nginx's `proxy_redirect`, `proxy_cookie_domain` and
/// `proxy_cookie_path` do. What already names the upstream's own space is left alone.
public struct ForwardedAddressSpace: Sendable, Equatable {
    /// The browser's side: scheme, host and port of the public URL, and the prefix path
    /// (`/pfx/web/sp`, never ending in `/`).
    public let publicOrigin: URLParts
    public let publicPrefix: String
    /// The upstream's side: the destination URL (its path without a trailing `/`).
    public let upstreamOrigin: URLParts
    public let upstreamPath: String

    /// Nil when either URL is not an absolute http(s) URL.
    public init?(publicBase: String, upstreamBase: String) {
        guard let publicParts = URLParts(publicBase), let upstreamParts = URLParts(upstreamBase) else { return nil }
        publicOrigin = publicParts
        publicPrefix = Self.trimmingSlashes(publicParts.path)
        upstreamOrigin = upstreamParts
        upstreamPath = Self.trimmingSlashes(upstreamParts.path)
    }

    // MARK: Location

    /// A `Location` in the browser's space under the prefix, as the upstream URL it stands for;
    /// nil when it is not one (then it means what it says). Absolute URLs must name the public
    /// origin; a path-absolute reference (`/pfx/web/sp/…`) counts when it starts with the prefix.
    public func upstreamLocation(_ location: String) -> String? {
        let rest: Substring
        if location.hasPrefix("/") && !location.hasPrefix("//") {
            guard let tail = Self.tail(of: Substring(location), under: publicPrefix) else { return nil }
            rest = tail
        } else {
            let absolute = location.hasPrefix("//") ? publicOrigin.scheme + ":" + location : location
            guard let parts = URLParts(absolute), sameOrigin(parts, publicOrigin),
                let tail = Self.tail(of: Substring(parts.path), under: publicPrefix)
            else { return nil }
            rest = tail + (parts.query.map { "?" + $0 } ?? "")
        }
        guard !rest.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }) else { return nil }
        let path = rest.hasPrefix("?") || rest.isEmpty ? upstreamPath + "/" + rest : upstreamPath + rest
        return upstreamOrigin.origin + path
    }

    /// The answer's `Location`, when it names the browser's space, set to the upstream URL it stands for.
    public func mapLocationBack(in response: inout UpstreamResponse) {
        if let location = response.headers["Location"], let upstream = upstreamLocation(location) {
            response.headers.set("Location", upstream)
        }
    }

    // MARK: cookies

    /// A `Set-Cookie` value with a `Domain` naming the public host and a `Path` at or under the
    /// prefix mapped into the upstream's space. A `Path` equal to the prefix (with or without its
    /// trailing `/`) covers the upstream's whole destination path. Everything else is kept byte
    /// for byte, so the cookie jar's own checks (RFC 6265) still judge the result.
    public func upstreamSetCookie(_ header: String) -> String {
        var changed = false
        let parts = header.split(separator: ";", omittingEmptySubsequences: false).enumerated().map { index, part -> Substring in
            guard index > 0, let eq = part.firstIndex(of: "=") else { return part }
            let key = part[..<eq].trimmingCharacters(in: .whitespaces).lowercased()
            let value = part[part.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            switch key {
            case "domain":
                let domain = value.hasPrefix(".") ? String(value.dropFirst()) : value
                guard domain.lowercased() == publicOrigin.host else { return part }
                changed = true
                return " Domain=" + Substring(upstreamOrigin.host)
            case "path":
                guard let tail = Self.tail(of: Substring(value), under: publicPrefix) else { return part }
                changed = true
                let mapped = tail.isEmpty || tail == "/" ? (upstreamPath.isEmpty ? "/" : upstreamPath) : upstreamPath + tail
                return " Path=" + Substring(mapped)
            default:
                return part
            }
        }
        return changed ? parts.joined(separator: ";") : header
    }

    // MARK: helpers

    /// What follows `prefix` in `path` (empty, or starting with `/` or `?`), at a segment
    /// boundary; nil when `path` is not at or under `prefix`. Compared byte for byte.
    static func tail(of path: Substring, under prefix: String) -> Substring? {
        guard path.utf8.starts(with: prefix.utf8) else { return nil }
        let rest = path.utf8.dropFirst(prefix.utf8.count)
        guard let first = rest.first else { return "" }
        guard first == UInt8(ascii: "/") || first == UInt8(ascii: "?") else { return nil }
        return Substring(rest)
    }

    private func sameOrigin(_ a: URLParts, _ b: URLParts) -> Bool {
        a.scheme == b.scheme && a.host == b.host && a.effectivePort == b.effectivePort
    }

    private static func trimmingSlashes(_ path: String) -> String {
        var path = Substring(path)
        while path.hasSuffix("/") { path = path.dropLast() }
        return String(path)
    }
}

/// A cookie jar seen through a `ForwardedAddressSpace`: what the upstream sets in the
/// browser's space is stored in the upstream's, where later requests (the browser's through
/// the hosted upstream and the API's alike) are matched against it.
public struct ForwardedCookieJar: CookieStorage {
    public let jar: any CookieStorage
    public let space: ForwardedAddressSpace

    public init(jar: any CookieStorage, space: ForwardedAddressSpace) {
        self.jar = jar
        self.space = space
    }

    public func cookieHeader(for url: String) async throws -> String? { try await jar.cookieHeader(for: url) }

    public func store(setCookies: [String], from url: String) async throws {
        try await jar.store(setCookies: setCookies.map(space.upstreamSetCookie), from: url)
    }
}
