import Foundation

/// A browser without scripts, for live tests of sign-ins that are redirects and forms only (an
/// OAuth2 authorization code flow, a Basic form): it follows `Location` across the loopback ports,
/// keeps the cookies each port sets (name and value; `Max-Age=0` deletes), and posts forms. What it
/// sends is what a browser sends for those pages; tests that need scripts or page rendering use
/// Chromium (`ChromeDriver`).
public struct PlainBrowser: Sendable {
    /// Cookies by port, then name.
    public private(set) var cookies: [Int: [String: String]] = [:]
    /// Every URL requested, in order.
    public private(set) var visited: [String] = []

    public init() {}

    /// Where a request ended: the last URL and its answer (not a redirect, or the redirect that
    /// leaves the loopback address).
    public struct Arrival: Sendable {
        public let url: String
        public let response: RawHTTPResponse
    }

    /// Opens `url` (`http://127.0.0.1:PORT/…`), with a form body for `POST`, and follows redirects.
    /// `origin`: the page a form post comes from (browsers send it as `Origin`).
    public mutating func open(
        _ url: String, method: String = "GET", form: [(String, String)]? = nil, origin: String? = nil, maxRedirects: Int = 12
    ) async throws -> Arrival {
        var current = url
        var method = method
        var body: [UInt8] = form.map { Array(Self.encode($0).utf8) } ?? []
        for _ in 0...maxRedirects {
            guard let (port, target) = Self.split(current) else { return Arrival(url: current, response: RawHTTPResponse(status: 0, headers: [], body: [])) }
            var headers: [(String, String)] = []
            if let jar = cookies[port], !jar.isEmpty {
                headers.append(("Cookie", jar.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")))
            }
            if method == "POST" {
                headers.append(("Content-Type", "application/x-www-form-urlencoded"))
                if let origin { headers.append(("Origin", origin)) }
            }
            headers.append(("Accept", "text/html"))
            visited.append(current)
            let response = try await RawHTTP.request(port: port, method: method, target: target, headers: headers, body: body)
            for header in response.headers("Set-Cookie") { keep(header, port: port) }
            // A redirect, or a page that moves on at once (`Refresh: 0; url=…`), as browsers follow both.
            var location = [301, 302, 303, 307, 308].contains(response.status) ? response.header("Location") : nil
            if location == nil, response.status == 200, let refresh = response.header("Refresh"), refresh.hasPrefix("0; url=") {
                location = String(refresh.dropFirst("0; url=".count))
            }
            guard let location else { return Arrival(url: current, response: response) }
            let next = location.hasPrefix("/") ? "http://127.0.0.1:\(port)" + location : location
            guard Self.split(next) != nil else { return Arrival(url: next, response: response) }
            if ![307, 308].contains(response.status) {
                method = "GET"
                body = []
            }
            current = next
        }
        throw RawHTTPError(description: "more than \(maxRedirects) redirects from \(url)")
    }

    /// Submits the page's first form as a browser does (its `action` resolved against the page's
    /// URL, its hidden and pre-filled inputs, then `fields`), and follows where it leads.
    public mutating func submit(_ page: Arrival, _ fields: [(String, String)] = []) async throws -> Arrival {
        let html = page.response.text
        guard let form = html.range(of: "<form"), let end = html.range(of: "</form>", range: form.upperBound..<html.endIndex) else {
            throw RawHTTPError(description: "no form on \(page.url)")
        }
        let markup = String(html[form.lowerBound..<end.upperBound])
        let action = Self.attribute("action", in: String(markup.prefix { $0 != ">" })).map(Self.unescape) ?? page.url
        let method = (Self.attribute("method", in: String(markup.prefix { $0 != ">" })) ?? "get").uppercased()
        var values: [(String, String)] = []
        var rest = markup[...]
        while let input = rest.range(of: "<input") {
            let tag = String(rest[input.lowerBound...].prefix { $0 != ">" })
            if let name = Self.attribute("name", in: tag), let value = Self.attribute("value", in: tag) {
                values.append((Self.unescape(name), Self.unescape(value)))
            }
            rest = rest[input.upperBound...]
        }
        values += fields
        let origin = Self.split(page.url).map { "http://127.0.0.1:\($0.0)" } ?? ""
        let target = action.hasPrefix("/") ? origin + action : action
        if method == "POST" { return try await open(target, method: "POST", form: values, origin: origin) }
        return try await open(target + (target.contains("?") ? "&" : "?") + Self.encode(values))
    }

    static func attribute(_ name: String, in tag: String) -> String? {
        guard let start = tag.range(of: " \(name)=\"") else { return nil }
        let rest = tag[start.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    static func unescape(_ text: String) -> String {
        text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'").replacingOccurrences(of: "&lt;", with: "<")
            .replacingOccurrences(of: "&gt;", with: ">").replacingOccurrences(of: "&#x2F;", with: "/").replacingOccurrences(of: "&amp;", with: "&")
    }

    /// Forgets every cookie of `port` (another browser profile, as far as that site can tell).
    public mutating func forget(port: Int) { cookies[port] = nil }

    private mutating func keep(_ header: String, port: Int) {
        let parts = header.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let pair = parts.first, let equals = pair.firstIndex(of: "=") else { return }
        let name = String(pair[..<equals])
        let value = String(pair[pair.index(after: equals)...])
        if parts.contains(where: { $0.lowercased() == "max-age=0" }) || value.isEmpty {
            cookies[port]?[name] = nil
        } else {
            cookies[port, default: [:]][name] = value
        }
    }

    /// The port and request target of a loopback http URL; nil for any other.
    static func split(_ url: String) -> (Int, String)? {
        let prefix = "http://127.0.0.1:"
        guard url.hasPrefix(prefix) else { return nil }
        let rest = url.dropFirst(prefix.count)
        let digits = rest.prefix { $0.isNumber }
        guard let port = Int(digits) else { return nil }
        let target = String(rest.dropFirst(digits.count))
        return (port, target.isEmpty ? "/" : target)
    }

    static func encode(_ pairs: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return pairs.map {
            ($0.0.addingPercentEncoding(withAllowedCharacters: allowed) ?? "") + "="
                + ($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
        }.joined(separator: "&")
    }
}
