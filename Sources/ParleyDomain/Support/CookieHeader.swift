/// The value a request's `Cookie` headers give one cookie, judged as Parley's cookies must be:
/// a value set beside Parley's (by a page's script, at another path) must not take it over, so
/// two different values of one name count as neither.
package enum CookieHeader {
    package enum Value: Equatable, Sendable {
        /// No cookie of that name.
        case none
        /// One value (however often the same value is repeated).
        case one(Substring)
        /// Two different values.
        case conflicting
    }

    /// The value of cookie `name` in `headers` (each a `Cookie` header's text).
    package static func value(of name: String, in headers: [String]) -> Value {
        var found: Substring?
        for header in headers {
            for pair in header.split(separator: ";", omittingEmptySubsequences: true) {
                guard let equals = pair.firstIndex(of: "="), trimmed(pair[..<equals]) == name else { continue }
                let value = trimmed(pair[pair.index(after: equals)...])
                if let found, found != value { return .conflicting }
                found = value
            }
        }
        return found.map(Value.one) ?? .none
    }

    /// Without the blanks (space, tab) around it.
    private static func trimmed(_ text: Substring) -> Substring {
        var text = text
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}
