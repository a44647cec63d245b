package import Foundation

extension HostedBinding {
    /// What a request's `Cookie` headers present as the binding to a flow.
    package enum Presented: Equatable, Sendable {
        /// No `parley_flow` cookie, or one Parley cannot have set (judged by its form, before any read).
        case none
        /// One binding: the only `parley_flow` value in the headers (however often repeated).
        case one(id: UUID, secret: String)
        /// Two different `parley_flow` values: neither counts.
        case conflicting
    }

    /// A flow secret as Parley makes it: 32 random bytes in unpadded base64url.
    package static let secretLength = 43

    /// The binding a request presents. Parley sets one `parley_flow` cookie, at the destination's
    /// path; a page the upstream serves under that path can set more (from a script), at a
    /// deeper path (the browser sends those first, RFC 6265 §5.4) or a shallower one (sent
    /// after). A value does not say where it was set, so a second, different value makes the
    /// request `conflicting` and no value counts: a planted binding can spoil a sign-in but
    /// never take it over. The values are only compared; the one value is checked for its
    /// form (`<uuid>.<secret>`, lowercase, 80 bytes) before anybody reads a flow for it, so a
    /// request costs at most one flow read, whatever its `Cookie` headers hold.
    package static func presented(in cookieHeaders: [String]) -> Presented {
        switch CookieHeader.value(of: cookieName, in: cookieHeaders) {
        case .none: return .none
        case .conflicting: return .conflicting
        case .one(let value):
            guard let (id, secret) = wellFormed(value) else { return .none }
            return .one(id: id, secret: secret)
        }
    }

    /// `<uuid>.<secret>` exactly as `bindingCookie` writes it, or nil.
    package static func wellFormed(_ value: Substring) -> (UUID, String)? {
        let bytes = Array(value.utf8.prefix(37 + secretLength + 1))
        guard bytes.count == 37 + secretLength, bytes[36] == UInt8(ascii: ".") else { return nil }
        for (index, byte) in bytes[..<36].enumerated() {
            let hyphen = index == 8 || index == 13 || index == 18 || index == 23
            guard hyphen ? byte == UInt8(ascii: "-") : isLowercaseHex(byte) else { return nil }
        }
        guard bytes[37...].allSatisfy(isBase64URL), let id = UUID(uuidString: String(decoding: bytes[..<36], as: UTF8.self)) else {
            return nil
        }
        return (id, String(decoding: bytes[37...], as: UTF8.self))
    }

    /// `Set-Cookie` values that remove every `parley_flow` cookie a browser could send with a
    /// request for `requestPath` (the raw path Parley saw): one per path that matches it
    /// (RFC 6265 §5.1.4), host-only and for the public host, the deepest 32 paths at most.
    /// After a conflict, the person starts again with a clean browser.
    package func clearingCookies(requestPath: String) -> [String] {
        let path = (publicParts?.path ?? "") + requestPath
        var candidates: [Substring] = [Substring(path)]
        for index in path.indices.reversed() where path[index] == "/" {
            candidates.append(path[...index])
            if index != path.startIndex { candidates.append(path[..<index]) }
        }
        var seen = Set<Substring>()
        let paths = candidates.filter { candidate in
            !candidate.isEmpty && candidate.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ";") } && seen.insert(candidate).inserted
        }.prefix(32)
        let secure = publicParts?.isSecure == true ? "; Secure" : ""
        let domains = [""] + (publicParts.map { ["; Domain=" + $0.host] } ?? [])
        return paths.flatMap { path in domains.map { "\(Self.cookieName)=; Path=\(path); Max-Age=0\($0)\(secure)" } }
    }


    private static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        isLowercaseHex(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }
}
