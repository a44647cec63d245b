import AuthFlows
import Conversation
import Foundation
import ParleyEncoding

/// The targets (the SAML response's is in SAMLResponseTarget.swift). Each checks what the product relies on after the parser said yes;
/// the parsers' own refusals are fine outcomes.
enum Targets {
    /// A fixed clock: the same input always takes the same path.
    static let now = Date(timeIntervalSince1970: 1_750_000_000)

    // MARK: upstream header block

    static func responseHead(_ input: [UInt8]) -> [String] {
        // Small limits, so that the size, field-count and interim limits are reached
        // within libFuzzer's input lengths; the code path is the product's.
        var parser = ResponseHeadParser(limits: .init(maxHeadBytes: 2048, maxFields: 24, maxInterimBlocks: 3))
        var start = 0
        while start < input.count {
            let end = input[start...].firstIndex(of: 0x0A).map { $0 + 1 } ?? input.count
            switch parser.feed(line: Array(input[start..<end])) {
            case .needMore, .interim:
                start = end
            case .failed:
                return []
            case .head(let status, let headers):
                var broken: [String] = []
                if !(200...599).contains(status) { broken.append("a final head with status \(status)") }
                var lengths = 0
                var chunked = false
                for field in headers {
                    if !HeaderFields.isSafe(name: field.name, value: field.value) { broken.append("an unsafe header field was passed on") }
                    switch field.name.lowercased() {
                    case "content-length": lengths += 1
                    case "transfer-encoding": chunked = true
                    default: break
                    }
                }
                if chunked && lengths > 0 { broken.append("Content-Length beside Transfer-Encoding was passed on") }
                return broken
            }
        }
        return []
    }

    // MARK: Set-Cookie

    static let cookieURL = URLParts("https://app.example.com/a/b")

    static func setCookie(_ input: [UInt8]) -> [String] {
        var url = cookieURL
        var header = String(decoding: input, as: UTF8.self)
        if let (first, rest) = splitFirstLine(input), let parsed = URLParts(String(decoding: first, as: UTF8.self)) {
            url = parsed
            header = String(decoding: rest, as: UTF8.self)
        }
        guard let url else { return ["the default cookie URL does not parse"] }
        guard case .store(let cookie) = Cookies.parse(header, from: url, at: now) else { return [] }
        var broken: [String] = []
        if cookie.name.isEmpty { broken.append("a cookie without a name was stored") }
        if !Cookies.domainMatches(host: url.host, domain: cookie.domain) { broken.append("a cookie for another host was stored") }
        if cookie.hostOnly && cookie.domain != url.host { broken.append("a host-only cookie names another host") }
        if cookie.secure && !url.isSecure { broken.append("a Secure cookie from an insecure URL was stored") }
        if !cookie.path.hasPrefix("/") { broken.append("a cookie path does not start with '/'") }
        if let expiry = cookie.expiresAt, expiry <= now { broken.append("an expired cookie was stored instead of deleted") }
        return broken
    }

    // MARK: token response

    static func tokenResponse(_ input: [UInt8]) -> [String] {
        var status = 200
        var retryAfter: String?
        var previous: String?
        var body = input
        if let first = input.first, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") {
            let (line, rest) = splitFirstLine(input) ?? (input[...], [])
            let words = line.split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false)
                .map { String(decoding: $0, as: UTF8.self) }
            status = words.first.flatMap { Int($0) } ?? 200
            if words.count > 1, words[1] != "-" { retryAfter = words[1] }
            if words.count > 2, words[2] != "-" { previous = words[2] }
            body = Array(rest)
        }
        let outcome = TokenResponse.parse(status: status, retryAfter: retryAfter, body: body, now: now, previousRefreshToken: previous)
        var broken: [String] = []
        switch outcome {
        case .token(let token):
            if status != 200 { broken.append("a token from HTTP \(status)") }
            if token.accessToken.isEmpty || token.accessToken.utf8.count > TokenResponse.maxTokenBytes {
                broken.append("an empty or oversized access token was accepted")
            }
            if token.accessToken.utf8.contains(where: { $0 < 0x20 || $0 >= 0x7F }) { broken.append("an access token with control bytes") }
            if let refresh = token.refreshToken, refresh != previous, refresh.isEmpty || refresh.utf8.count > TokenResponse.maxTokenBytes {
                broken.append("an empty or oversized refresh token was accepted")
            }
            if let idToken = token.idToken,
                idToken.isEmpty || idToken.utf8.count > TokenResponse.maxTokenBytes || idToken.utf8.contains(where: { $0 < 0x20 || $0 >= 0x7F })
            {
                broken.append("an empty, oversized or unprintable id_token was kept")
            }
            guard let expiry = token.expiresAt else {
                broken.append("a token without an expiry")
                break
            }
            let lifetime = expiry.timeIntervalSince(now)
            if !(lifetime >= 1 && lifetime <= Double(TokenResponse.maxLifetimeSeconds)) { broken.append("a token lifetime of \(lifetime) s") }
        case .transient(let retryAfter), .uncertain(let retryAfter, _):
            if let retryAfter, retryAfter < .zero || retryAfter > .seconds(3600) { broken.append("a Retry-After of \(retryAfter)") }
        case .refused(let error):
            if error.isEmpty || error.utf8.count > 64 + 8 || error.utf8.contains(where: { $0 < 0x20 || $0 >= 0x7F }) {
                broken.append("an error code that is empty, long or not ASCII text")
            }
        case .invalidGrant, .malformed:
            break
        }
        return broken
    }

    // MARK: userinfo

    /// A "yes" names somebody: 1 to `Userinfo.maxSubjectBytes` bytes without control
    /// characters, from a body no larger than `Userinfo.maxBodyBytes`.
    static func userinfo(_ input: [UInt8]) -> [String] {
        guard let subject = Userinfo.subject(from: input) else { return [] }
        var broken: [String] = []
        if input.count > Userinfo.maxBodyBytes { broken.append("a subject from a body of \(input.count) bytes") }
        if subject.isEmpty || subject.utf8.count > Userinfo.maxSubjectBytes { broken.append("a subject of \(subject.utf8.count) bytes") }
        if subject.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            broken.append("a subject with control characters")
        }
        return broken
    }

    // MARK: proxy path and query

    static let proxyBase = "https://upstream.example/base"

    static func proxyPath(_ input: [UInt8]) -> [String] {
        var baseURL = proxyBase
        var target = input[...]
        if let (first, rest) = splitFirstLine(input) {
            // The base is a destination's URL: only one that passes the destination checks.
            guard let destination = try? DestinationSpec(name: "d", url: String(decoding: first, as: UTF8.self)).validated() else { return [] }
            baseURL = destination.baseURL
            target = rest
        }
        let question = target.firstIndex(of: UInt8(ascii: "?"))
        let rawPath = String(decoding: target[..<(question ?? target.endIndex)], as: UTF8.self)
        let rawQuery = question.map { String(decoding: target[($0 + 1)...], as: UTF8.self) }
        guard let url = try? ProxyPath.upstreamURL(baseURL: baseURL, rawPath: rawPath, rawQuery: rawQuery) else { return [] }

        var broken: [String] = []
        guard let base = URLParts(baseURL), let result = URLParts(url) else { return ["the upstream URL does not parse"] }
        if result.scheme != base.scheme || result.host != base.host || result.effectivePort != base.effectivePort {
            broken.append("the upstream URL leaves the destination's origin")
        }
        // Bytes, not Characters: a combining mark after '?' or '/' would hide it from a
        // grapheme-based search (libcurl reads bytes).
        guard url.utf8.starts(with: (baseURL + "/").utf8) else { return broken + ["the upstream URL does not start with the destination URL"] }
        let tail = Array(url.utf8.dropFirst(baseURL.utf8.count + 1))
        let path = tail.prefix { $0 != UInt8(ascii: "?") }
        for segment in path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard let decoded = PercentEncoding.decode(String(decoding: segment, as: UTF8.self)) else {
                broken.append("a segment with bad percent-encoding was passed on")
                continue
            }
            if ProxyPath.isDotSegment(decoded) { broken.append("a '.' or '..' segment was passed on") }
            if decoded.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) {
                broken.append("a segment with a control character, '/' or '\\' was passed on")
            }
        }
        if path.contains(where: { $0 <= 0x20 || $0 >= 0x7F || $0 == UInt8(ascii: "#") || $0 == UInt8(ascii: "\\") }) {
            broken.append("the path part carries bytes that must be escaped")
        }
        if tail.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
            broken.append("the upstream URL carries a space, control character or '#'")
        }
        return broken
    }

    // MARK: destinations file

    static func destinations(_ input: [UInt8]) -> [String] {
        guard let checked = try? DestinationsDocument.readContents(String(decoding: input, as: UTF8.self)) else { return [] }
        let destinations = checked.destinations
        var broken: [String] = []
        if Set(checked.identityProviders.map(\.issuer)).count != checked.identityProviders.count {
            broken.append("two identity providers share an issuer")
        }
        for provider in checked.identityProviders {
            if provider.issuer.isEmpty { broken.append("an identity provider without an issuer") }
            if provider.audiences.isEmpty || provider.audiences.contains(where: \.isEmpty) { broken.append("an identity provider without a usable audience") }
            if provider.userClaim.isEmpty { broken.append("an identity provider without a user claim") }
            if URLParts(provider.jwksURI) == nil { broken.append("an identity provider whose jwksUri does not parse") }
            if provider.jwksURI.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
                broken.append("an identity provider whose jwksUri has a fragment, space or control character")
            }
        }
        if checked.identityProviders.isEmpty, destinations.contains(where: \.identityRequired) {
            broken.append("a destination requires verified users but no identity provider is listed")
        }
        if Set(destinations.map(\.name)).count != destinations.count { broken.append("two destinations share a name") }
        for destination in destinations {
            if destination.name.isEmpty { broken.append("a destination without a name") }
            guard let parts = URLParts(destination.baseURL) else {
                broken.append("a destination URL that does not parse")
                continue
            }
            if parts.query != nil { broken.append("a destination URL with a query") }
            if destination.baseURL.utf8.last == UInt8(ascii: "/") { broken.append("a destination URL with a trailing '/'") }
            if destination.baseURL.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
                broken.append("a destination URL with a fragment, space or control character")
            }
        }
        return broken
    }

    // MARK: flow callback query

    static func callbackQuery(_ input: [UInt8]) -> [String] {
        guard let pairs = PercentEncoding.decodeForm(String(decoding: input, as: UTF8.self)) else { return [] }
        // What Parley writes (authorization requests, OTP forms) reads back as it was.
        guard let again = PercentEncoding.decodeForm(PercentEncoding.encodeForm(pairs)) else {
            return ["an encoded form does not decode"]
        }
        // Byte for byte: String's == would accept a canonically equivalent spelling.
        let same = again.count == pairs.count && zip(again, pairs).allSatisfy { $0.0.utf8.elementsEqual($1.0.utf8) && $0.1.utf8.elementsEqual($1.1.utf8) }
        return same ? [] : ["a form does not survive encode and decode"]
    }

    // MARK: helpers

    /// The bytes before the first `\n` (a trailing `\r` dropped) and those after it.
    static func splitFirstLine(_ input: [UInt8]) -> (ArraySlice<UInt8>, ArraySlice<UInt8>)? {
        guard let newline = input.firstIndex(of: 0x0A) else { return nil }
        var first = input[..<newline]
        if first.last == 0x0D { first = first.dropLast() }
        return (first, input[(newline + 1)...])
    }
}
