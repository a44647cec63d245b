import AuthFlows
import Conversation
import ParleyDomain
@testable import ParleyServer
import Testing

/// The proxy rules without a server: headers that never go upstream, and the upstream
/// URL built by `ProxyPath` with the same refusals (and words) the API has always given.
@Suite struct ProxyRulesTests {
    @Test func routingOverrideHeadersNeverGoUpstream() {
        let overrides = [
            "X-Original-URL", "X-Rewrite-URL", "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Real-IP", "True-Client-IP",
        ]
        let sent = overrides.map { ($0, "/admin") } + [("x-original-url", "/lower"), ("TRUE-CLIENT-IP", "1.2.3.4"), ("X-Keep", "kept")]
        let forwarded = ProxyRules.forwardable(sent.map { (name: $0.0, value: $0.1) })
        #expect(forwarded.map(\.name) == ["X-Keep"])
    }

    /// Headers that name the client's address to an upstream that believes them: only
    /// Parley may say where a request came from (issue 20).
    @Test func clientAddressHeadersNeverGoUpstream() {
        let spoofed = [
            "X-Client-IP", "Client-IP", "X-Cluster-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Forwarded", "X-Host",
            "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr", "x-forwarded", "CLIENT-IP",
        ]
        let forwarded = ProxyRules.forwardable(spoofed.map { (name: $0, value: "10.0.0.1") } + [(name: "X-Keep", value: "kept")])
        #expect(forwarded.map(\.name) == ["X-Keep"])
    }

    @Test func upstreamURLKeepsItsRefusalsAndWords() throws {
        let destination = try DestinationSpec(name: "d", url: "https://upstream.example/base/").validated()
        #expect(try ProxyRules.upstreamURL(destination: destination, rawPath: "a/b%20c/", rawQuery: "x=1") == "https://upstream.example/base/a/b%20c/?x=1")
        let refused: [(String, String?, String)] = [
            ("a//b", nil, "the proxy path has an empty segment ('//')"),
            ("a\\b", nil, "the proxy path contains a backslash"),
            ("a%zz", nil, "the proxy path has bad percent-encoding"),
            ("a%0d", nil, "the proxy path contains control characters"),
            ("a%2Fb", nil, "the proxy path contains an encoded '/' or '\\'"),
            ("%2e%2e;x/admin", nil, "the proxy path contains a '.' or '..' segment"),
            ("a", "x=1#frag", "the query contains characters that are not allowed"),
        ]
        for (path, query, words) in refused {
            #expect(throws: Problem.self) { try ProxyRules.upstreamURL(destination: destination, rawPath: path, rawQuery: query) }
            do {
                _ = try ProxyRules.upstreamURL(destination: destination, rawPath: path, rawQuery: query)
            } catch {
                #expect(error.code == .invalidRequest)
                #expect(error.detail == words, "\(path)")
            }
        }
        // Segments are split on bytes: a combining mark after '/' does not hide it (found by the fuzzer).
        #expect(try ProxyRules.upstreamURL(destination: destination, rawPath: "a/\u{301}b", rawQuery: nil) == "https://upstream.example/base/a/%CC%81b")
        #expect(throws: ProxyPathError.unusableDestination) { try ProxyPath.upstreamURL(baseURL: "ftp://x", rawPath: "a", rawQuery: nil) }
        // Kept as it is: '@' and ':' are path characters and stay after the first '/'.
        #expect(
            try ProxyPath.upstreamURL(baseURL: "https://upstream.example", rawPath: "x@evil.example:1", rawQuery: nil)
                == "https://upstream.example/x@evil.example:1")
    }

    /// The client token of `Authorization: Bearer …`, read byte by byte: the scheme in any
    /// case, blanks around the token dropped; anything else is no bearer token.
    @Test func aBearerTokenIsReadFromItsHeaderOnly() {
        #expect(bearerToken(authorization: "Bearer pct_abc") == "pct_abc")
        #expect(bearerToken(authorization: "bEaReR   pct_abc \t ") == "pct_abc")
        #expect(bearerToken(authorization: "Bearer ") == nil)
        #expect(bearerToken(authorization: "Bearer  \t ") == nil)
        #expect(bearerToken(authorization: "Bearer\u{0}pct_abc") == nil)
        #expect(bearerToken(authorization: "Bearerpct_abc") == nil)
        #expect(bearerToken(authorization: "Basic YTpi") == nil)
        #expect(bearerToken(authorization: "Bearér pct") == nil)
        #expect(bearerToken(authorization: "bearer é") == "é")
    }

    /// A request target splits at the first `?` byte, below its prefix at a segment boundary.
    @Test func aRequestTargetSplitsByBytes() {
        #expect(RequestTarget.split("/v1/proxy/a/b?x=1?y", prefix: "/v1/proxy")! == ("a/b", "x=1?y"))
        #expect(RequestTarget.split("/v1/proxy", prefix: "/v1/proxy")! == ("", nil))
        #expect(RequestTarget.split("/v1/proxy/", prefix: "/v1/proxy")! == ("", nil))
        #expect(RequestTarget.split("/v1/proxy?q", prefix: "/v1/proxy")! == ("", "q"))
        #expect(RequestTarget.split("/v1/proxy/é?\u{301}b", prefix: "/v1/proxy")! == ("é", "\u{301}b"))
        #expect(RequestTarget.split("/v1/proxyx/a", prefix: "/v1/proxy") == nil)
        #expect(RequestTarget.split("//v1/proxy/a", prefix: "/v1/proxy") == nil)
        #expect(RequestTarget.split("http://h/v1/proxy/a", prefix: "/v1/proxy") == nil)
    }

    @Test func dotSegmentsAreSeenAsServersSeeThem() {
        for dot in [".", "..", ".;x", "..;", "..;a=b"] { #expect(ProxyPath.isDotSegment(Array(dot.utf8)), "\(dot)") }
        for plain in ["", "...", ".a", "a.", ";..", "x;.."] { #expect(!ProxyPath.isDotSegment(Array(plain.utf8)), "\(plain)") }
    }
}
