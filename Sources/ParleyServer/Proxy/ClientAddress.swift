import ParleyDomain
/// An IPv4 or IPv6 address, parsed in Swift from text that may be hostile (an
/// `X-Forwarded-For` hop, a configured proxy). IPv4 is held as its IPv4-mapped IPv6
/// form (`::ffff:a.b.c.d`), so one comparison serves both families.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// The 16 bytes of the IPv6 form.
    public let bytes: [UInt8]

    private init(bytes: [UInt8]) { self.bytes = bytes }

    /// `a.b.c.d`, or an IPv6 address in any RFC 4291 text form (`::`, an IPv4 tail);
    /// brackets (`[::1]`) are allowed. No zone ids, no ports, no leading zeros in IPv4.
    public init?(_ text: some StringProtocol) {
        var text = Substring(text)
        guard !text.isEmpty, text.utf8.count <= 64 else { return nil }
        if text.first == "[" && text.last == "]" { text = text.dropFirst().dropLast() }
        if let v4 = Self.parseIPv4(text) {
            bytes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] + v4
        } else if let v6 = Self.parseIPv6(text) {
            bytes = v6
        } else {
            return nil
        }
    }

    /// An IPv4 address or an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
    public var isIPv4: Bool { bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF }

    /// The key a client is counted under: an IPv4 address as itself; an IPv6 address by its
    /// /64 (one subscriber usually holds a whole /64, so counting single addresses would
    /// give them 2^64 budgets).
    public var bucket: String {
        if isIPv4 { return description }
        return Self.ipv6Text(Array(bytes[0..<8]) + [UInt8](repeating: 0, count: 8)) + "/64"
    }

    public var description: String {
        isIPv4 ? bytes[12...].map(String.init).joined(separator: ".") : Self.ipv6Text(bytes)
    }

    private static func parseIPv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var out: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.utf8.count), part.utf8.allSatisfy({ (48...57).contains($0) }),
                part.utf8.count == 1 || part.utf8.first != UInt8(ascii: "0"), let value = UInt8(part)
            else { return nil }
            out.append(value)
        }
        return out
    }

    private static func parseIPv6(_ text: Substring) -> [UInt8]? {
        guard text.contains(":") else { return nil }
        let halves = text.split(separator: "::", maxSplits: 2, omittingEmptySubsequences: false)
        guard halves.count <= 2 else { return nil }
        func groups(_ part: Substring, allowIPv4Tail: Bool) -> [UInt8]? {
            if part.isEmpty { return [] }
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            var out: [UInt8] = []
            for (index, piece) in pieces.enumerated() {
                if allowIPv4Tail && index == pieces.count - 1 && piece.contains(".") {
                    guard let v4 = parseIPv4(piece) else { return nil }
                    out += v4
                    continue
                }
                guard (1...4).contains(piece.utf8.count), let value = UInt16(piece, radix: 16), piece.utf8.allSatisfy({ $0.isHexDigit })
                else { return nil }
                out += [UInt8(value >> 8), UInt8(value & 0xFF)]
            }
            return out
        }
        if halves.count == 1 {
            guard let all = groups(halves[0], allowIPv4Tail: true), all.count == 16 else { return nil }
            return all
        }
        guard let head = groups(halves[0], allowIPv4Tail: false), let tail = groups(halves[1], allowIPv4Tail: true),
            head.count + tail.count <= 14
        else { return nil }
        return head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
    }

    /// RFC 5952's form: lower case, the longest run (two or more) of zero groups as `::`.
    private static func ipv6Text(_ bytes: [UInt8]) -> String {
        let groups = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
        var best = (start: -1, length: 0)
        var run = (start: -1, length: 0)
        for (index, group) in groups.enumerated() {
            if group == 0 {
                run = run.start < 0 ? (index, 1) : (run.start, run.length + 1)
                if run.length > best.length { best = run }
            } else {
                run = (-1, 0)
            }
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.length >= 2 else { return hex.joined(separator: ":") }
        let head = hex[..<best.start].joined(separator: ":")
        let tail = hex[(best.start + best.length)...].joined(separator: ":")
        return head + "::" + tail
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool { (48...57).contains(self) || (65...70).contains(self) || (97...102).contains(self) }
}

/// An address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`), or one address (a
/// range of one). An IPv4 range matches IPv4 and IPv4-mapped IPv6 addresses alike.
public struct IPRange: Sendable, Hashable, CustomStringConvertible {
    public let network: IPAddress
    /// Prefix length over the 128-bit form (an IPv4 `/n` is `96 + n`).
    public let prefixLength: Int

    /// `address` or `address/length`; nil for anything else, host bits set included
    /// (`10.0.0.1/8` is a typo of `10.0.0.0/8` or of `10.0.0.1`, so it is refused).
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(parts[0]) else { return nil }
        let width = address.isIPv4 ? 32 : 128
        var length = width
        if parts.count == 2 {
            guard (1...3).contains(parts[1].utf8.count), parts[1].utf8.allSatisfy({ (48...57).contains($0) }), let n = Int(parts[1]),
                (0...width).contains(n)
            else { return nil }
            length = n
        }
        network = address
        prefixLength = length + (128 - width)
        guard Self.masked(address.bytes, prefixLength) == address.bytes else { return nil }
    }

    public func contains(_ address: IPAddress) -> Bool {
        Self.masked(address.bytes, prefixLength) == network.bytes
    }

    public var description: String {
        let width = network.isIPv4 ? 32 : 128
        let length = prefixLength - (128 - width)
        return length == width ? network.description : "\(network)/\(length)"
    }

    private static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = min(8, max(0, length - index * 8))
            return bits == 8 ? byte : byte & ~(UInt8(0xFF) >> bits)
        }
    }
}
