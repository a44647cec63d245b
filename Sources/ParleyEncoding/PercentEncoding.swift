/// The one percent-encoding codec (RFC 3986) and its form flavour
/// (`application/x-www-form-urlencoded`), on bytes, without Foundation.
public enum PercentEncoding {
    private static let digits = Array("0123456789ABCDEF".utf8)

    /// Decodes `%XX` escapes; `plusAsSpace` for form bodies and queries. Nil on a broken escape.
    public static func decode(_ text: some StringProtocol, plusAsSpace: Bool = false) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        var bytes = text.utf8.makeIterator()
        while let b = bytes.next() {
            if b == UInt8(ascii: "%") {
                guard let h = bytes.next(), let l = bytes.next(), let hv = hexValue(h), let lv = hexValue(l) else { return nil }
                out.append(hv << 4 | lv)
            } else if plusAsSpace && b == UInt8(ascii: "+") {
                out.append(0x20)
            } else {
                out.append(b)
            }
        }
        return out
    }

    /// RFC 3986 `pchar`: unreserved, sub-delims, `:` and `@` stay; every other byte is escaped.
    public static func encodePathSegment(_ bytes: some Sequence<UInt8>) -> String {
        encode(bytes, keeping: isPathCharacter)
    }

    /// Whether `encodePathSegment` keeps the byte as it is (RFC 3986 `pchar` without `%`).
    public static func isPathCharacter(_ b: UInt8) -> Bool {
        isUnreserved(b) || isSubDelimiter(b) || b == UInt8(ascii: ":") || b == UInt8(ascii: "@")
    }

    /// A form component: unreserved characters stay, everything else (space too) is escaped.
    public static func encodeFormComponent(_ text: String) -> String {
        encode(text.utf8, keeping: isUnreserved)
    }

    /// `a=b&c=d` from pairs.
    public static func encodeForm(_ pairs: [(String, String)]) -> String {
        pairs.map { encodeFormComponent($0.0) + "=" + encodeFormComponent($0.1) }.joined(separator: "&")
    }

    /// Decodes `a=b&c=d` (with `+` as space); nil on bad percent-encoding or invalid UTF-8.
    public static func decodeForm(_ text: some StringProtocol) -> [(String, String)]? {
        var out: [(String, String)] = []
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0], plusAsSpace: true).flatMap({ String(validating: $0, as: UTF8.self) }),
                let value = decode(parts.count > 1 ? parts[1] : "", plusAsSpace: true).flatMap({ String(validating: $0, as: UTF8.self) })
            else { return nil }
            out.append((name, value))
        }
        return out
    }

    private static func encode(_ bytes: some Sequence<UInt8>, keeping keep: (UInt8) -> Bool) -> String {
        var out: [UInt8] = []
        for b in bytes {
            if keep(b) {
                out.append(b)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(b >> 4)], digits[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func isUnreserved(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default: false
        }
    }

    private static func isSubDelimiter(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - 48
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - 87
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - 55
        default: nil
        }
    }
}
