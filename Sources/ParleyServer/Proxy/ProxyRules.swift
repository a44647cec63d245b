import AuthFlows
import Conversation

/// CONTRACT.md's proxy rules as pure functions: upstream URL construction with
/// path safety, and the header sets that never cross Parley.
enum ProxyRules {
    /// Builds `destination.url + "/" + path` from the raw request target after `/v1/proxy/`
    /// (`ProxyPath` in AuthFlows, pure and fuzzed); a refusal is `400 invalid_request`.
    static func upstreamURL(destination: Destination, rawPath: String, rawQuery: String?) throws(Problem) -> String {
        do {
            return try ProxyPath.upstreamURL(baseURL: destination.baseURL, rawPath: rawPath, rawQuery: rawQuery)
        } catch {
            throw Problem.invalid(error.description)
        }
    }

    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    ]

    /// Headers that some upstream frameworks and proxies read as the real target, method,
    /// host or client address; a client must not steer the upstream past Parley's checks
    /// (nor pose as another address to the upstream's own limits and logs).
    static let routingOverrides: Set<String> = [
        "x-original-url", "x-rewrite-url", "x-http-method-override", "x-http-method", "x-method-override", "x-real-ip",
        "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "cf-connecting-ip", "fastly-client-ip", "x-forwarded",
        "x-host", "x-originating-ip", "x-remote-ip", "x-remote-addr",
    ]

    /// Client headers that go upstream: end-to-end only, without the client's
    /// credentials, cookies, forwarding and routing-override headers, or what libcurl
    /// sets itself.
    static func forwardable(_ headers: [(name: String, value: String)]) -> HeaderFields {
        let named = connectionNamed(headers)
        var out = HeaderFields()
        for (name, value) in headers {
            let lower = name.lowercased()
            if hopByHop.contains(lower) || named.contains(lower) || lower.hasPrefix("proxy-") || lower.hasPrefix("x-forwarded-")
                || lower.hasPrefix("parley-") || routingOverrides.contains(lower)
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
        let named = connectionNamed(headers.lazy.map { (name: $0.name, value: $0.value) })
        var out: [(String, String)] = []
        out.reserveCapacity(headers.underestimatedCount)
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

    private static func connectionNamed(_ headers: some Sequence<(name: String, value: String)>) -> Set<String> {
        var named = Set<String>()
        for (name, value) in headers where name.utf8.count == 10 && name.lowercased() == "connection" {
            for token in value.split(separator: ",") { named.insert(token.trimmingCharacters(in: .whitespaces).lowercased()) }
        }
        return named
    }
}

import Foundation
import ParleyDomain
