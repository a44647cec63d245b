import Conversation
import ParleyEncoding

/// The upstream URL for a proxied request: `baseURL + "/" + path [+ "?" + query]`, built
/// from the raw (still percent-encoded) request target that a thin client or a browser
/// sent. Every byte is the caller's and may be hostile; this is pure so that it can be
/// fuzzed without a server (`parley-fuzz proxy-path`).
public enum ProxyPath {
    /// Refuses `.`/`..` segments (also encoded, also before a `;parameter`), encoded `/`
    /// or `\`, raw `\`, empty segments, control characters and bad percent-encoding in
    /// the path; control characters, spaces and `#` in the query. Then checks that the
    /// result stays on the base URL's scheme, host, port and path.
    public static func upstreamURL(baseURL: String, rawPath: String, rawQuery: String?) throws(ProxyPathError) -> String {
        guard let base = URLParts(baseURL) else { throw ProxyPathError(.unusableDestination) }
        // The URL is written as bytes: a segment of path characters only (the usual case) is
        // its own decoding and encoding and goes in as it is; others are decoded, checked and
        // encoded again.
        var bytes = Array(baseURL.utf8)
        bytes.reserveCapacity(bytes.count + 1 + rawPath.utf8.count + (rawQuery.map { 1 + $0.utf8.count } ?? 0))
        bytes.append(UInt8(ascii: "/"))
        // Bytes, not Characters: a combining mark after '/' must not hide the separator.
        let parts = rawPath.isEmpty ? [] : rawPath.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        for (index, raw) in parts.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "/")) }
            if raw.isEmpty {
                if index == parts.count - 1 && index > 0 { continue }  // one trailing slash is an ordinary URL
                throw ProxyPathError(.emptySegment)
            }
            if raw.allSatisfy(PercentEncoding.isPathCharacter) {
                if isDotSegment(raw) { throw ProxyPathError(.dotSegment) }
                bytes.append(contentsOf: raw)
                continue
            }
            if raw.contains(UInt8(ascii: "\\")) { throw ProxyPathError(.backslash) }
            guard let decoded = PercentEncoding.decode(Substring(raw)) else { throw ProxyPathError(.badPercentEncoding) }
            if decoded.contains(where: { $0 < 0x20 || $0 == 0x7F }) { throw ProxyPathError(.controlCharacters) }
            if decoded.contains(UInt8(ascii: "/")) || decoded.contains(UInt8(ascii: "\\")) { throw ProxyPathError(.encodedSeparator) }
            if isDotSegment(decoded) { throw ProxyPathError(.dotSegment) }
            bytes.append(contentsOf: PercentEncoding.encodePathSegment(decoded).utf8)
        }
        if let rawQuery {
            if rawQuery.utf8.contains(where: { $0 < 0x21 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) { throw ProxyPathError(.badQuery) }
            bytes.append(UInt8(ascii: "?"))
            bytes.append(contentsOf: rawQuery.utf8)
        }
        let url = String(decoding: bytes, as: UTF8.self)
        guard let result = URLParts(url), result.scheme == base.scheme, result.host == base.host,
            result.effectivePort == base.effectivePort, result.path.hasPrefix(base.path)
        else { throw ProxyPathError(.leavesDestination) }
        return url
    }

    /// Whether a decoded segment reads as `.` or `..` to some server: servers that take
    /// `;` as a segment parameter (Tomcat, Jetty) read `..;x` as `..`.
    public static func isDotSegment<Bytes: Collection<UInt8>>(_ decoded: Bytes) -> Bool {
        let dotPart = decoded[..<(decoded.firstIndex(of: UInt8(ascii: ";")) ?? decoded.endIndex)]
        return (1...2).contains(dotPart.count) && dotPart.allSatisfy { $0 == UInt8(ascii: ".") }
    }
}

/// Why a proxy target was refused. The description names no byte of the input, so it
/// can be shown to the caller as it is (`400 invalid_request`).
public struct ProxyPathError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Code: Sendable, Equatable {
        case unusableDestination, emptySegment, backslash, badPercentEncoding, controlCharacters, encodedSeparator, dotSegment
        case badQuery, leavesDestination
    }

    let code: Code

    init(_ code: Code) { self.code = code }

    public static let unusableDestination = ProxyPathError(.unusableDestination)
    public static let emptySegment = ProxyPathError(.emptySegment)
    public static let backslash = ProxyPathError(.backslash)
    public static let badPercentEncoding = ProxyPathError(.badPercentEncoding)
    public static let controlCharacters = ProxyPathError(.controlCharacters)
    public static let encodedSeparator = ProxyPathError(.encodedSeparator)
    public static let dotSegment = ProxyPathError(.dotSegment)
    public static let badQuery = ProxyPathError(.badQuery)
    public static let leavesDestination = ProxyPathError(.leavesDestination)

    public var description: String {
        switch code {
        case .unusableDestination: "destination URL is not usable"
        case .emptySegment: "the proxy path has an empty segment ('//')"
        case .backslash: "the proxy path contains a backslash"
        case .badPercentEncoding: "the proxy path has bad percent-encoding"
        case .controlCharacters: "the proxy path contains control characters"
        case .encodedSeparator: "the proxy path contains an encoded '/' or '\\'"
        case .dotSegment: "the proxy path contains a '.' or '..' segment"
        case .badQuery: "the query contains characters that are not allowed"
        case .leavesDestination: "the proxy path leaves the destination"
        }
    }
}
