import ParleyEncoding
import AuthFlows
import Conversation

/// CONTRACT.md's proxy rules as pure functions: upstream URL construction with
/// path safety, and the header sets that never cross Parley.
enum ProxyRules {
    /// Builds `destination.url + "/" + path` from the raw request target after `/v1/proxy/`.
    /// Refuses `.`/`..` segments (also encoded), encoded `/` or `\`, raw `\`, empty
    /// segments, control characters and bad percent-encoding; then checks that the
    /// result stays on the destination's scheme, host, port and path.
    static func upstreamURL(destination: Destination, rawPath: String, rawQuery: String?) throws(Problem) -> String {
        guard let base = URLParts(destination.baseURL) else { throw Problem.invalid("destination URL is not usable") }
        var segments: [String] = []
        let parts = rawPath.isEmpty ? [] : rawPath.split(separator: "/", omittingEmptySubsequences: false)
        for (index, raw) in parts.enumerated() {
            if raw.isEmpty {
                if index == parts.count - 1 && index > 0 {  // one trailing slash is an ordinary URL
                    segments.append("")
                    continue
                }
                throw Problem.invalid("the proxy path has an empty segment ('//')")
            }
            if raw.contains("\\") { throw Problem.invalid("the proxy path contains a backslash") }
            guard let decoded = PercentEncoding.decode(raw) else { throw Problem.invalid("the proxy path has bad percent-encoding") }
            if decoded.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
                throw Problem.invalid("the proxy path contains control characters")
            }
            if decoded.contains(UInt8(ascii: "/")) || decoded.contains(UInt8(ascii: "\\")) {
                throw Problem.invalid("the proxy path contains an encoded '/' or '\\'")
            }
            // Servers that take `;` as a segment parameter (Tomcat, Jetty) read `..;x` as `..`.
            let dotPart = decoded.split(separator: UInt8(ascii: ";"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
            if dotPart.elementsEqual([UInt8(ascii: ".")]) || dotPart.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                throw Problem.invalid("the proxy path contains a '.' or '..' segment")
            }
            segments.append(PercentEncoding.encodePathSegment(decoded))
        }
        if let rawQuery, rawQuery.utf8.contains(where: { $0 < 0x21 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
            throw Problem.invalid("the query contains characters that are not allowed")
        }
        var url = destination.baseURL + "/" + segments.joined(separator: "/")
        if let rawQuery { url += "?" + rawQuery }
        guard let result = URLParts(url), result.scheme == base.scheme, result.host == base.host,
            result.effectivePort == base.effectivePort, result.path.hasPrefix(base.path)
        else { throw Problem.invalid("the proxy path leaves the destination") }
        return url
    }

    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    ]

    /// Client headers that go upstream: end-to-end only, without the client's
    /// credentials, cookies, forwarding headers, or what libcurl sets itself.
    static func forwardable(_ headers: [(name: String, value: String)]) -> HeaderFields {
        let named = connectionNamed(headers)
        var out = HeaderFields()
        for (name, value) in headers {
            let lower = name.lowercased()
            if hopByHop.contains(lower) || named.contains(lower) || lower.hasPrefix("proxy-") || lower.hasPrefix("x-forwarded-")
                || lower.hasPrefix("parley-")
            {
                continue
            }
            switch lower {
            case "authorization", "cookie", "forwarded", "host", "content-length", "expect", "x-smp-appcid":
                continue
            default:
                out.append(name, value)
            }
        }
        return out
    }

    /// Upstream headers that go back to the client: end-to-end only, never
    /// `Set-Cookie`, and never the CSRF token when Parley keeps it.
    static func returnable(_ headers: HeaderFields, csrf: Bool) -> [(name: String, value: String)] {
        let named = connectionNamed(headers.map { ($0.name, $0.value) })
        var out: [(String, String)] = []
        for field in headers {
            let lower = field.name.lowercased()
            if hopByHop.contains(lower) || named.contains(lower) || lower.hasPrefix("proxy-") { continue }
            switch lower {
            case "set-cookie", "set-cookie2", "content-length", "x-smp-appcid":
                continue
            case "x-csrf-token" where csrf:
                continue
            default:
                out.append((field.name, field.value))
            }
        }
        return out
    }

    private static func connectionNamed(_ headers: [(name: String, value: String)]) -> Set<String> {
        var named = Set<String>()
        for (name, value) in headers where name.lowercased() == "connection" {
            for token in value.split(separator: ",") { named.insert(token.trimmingCharacters(in: .whitespaces).lowercased()) }
        }
        return named
    }
}

import Foundation
