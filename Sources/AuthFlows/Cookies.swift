public import Conversation
public import Foundation
internal import CPSL
import Synchronization

/// One upstream cookie as RFC 6265 §5.3 stores it.
public struct StoredCookie: Sendable, Equatable {
    public var name: String
    public var value: String
    public var domain: String
    public var path: String
    public var hostOnly: Bool
    public var secure: Bool
    public var httpOnly: Bool
    /// nil for a session cookie, which lives as long as the registration.
    public var expiresAt: Date?

    public init(
        name: String, value: String, domain: String, path: String, hostOnly: Bool, secure: Bool, httpOnly: Bool,
        expiresAt: Date?
    ) {
        self.name = name
        self.value = value
        self.domain = domain
        self.path = path
        self.hostOnly = hostOnly
        self.secure = secure
        self.httpOnly = httpOnly
        self.expiresAt = expiresAt
    }

    public func isExpired(at now: Date) -> Bool { expiresAt.map { $0 <= now } ?? false }

    /// RFC 6265 §5.4: whether this cookie goes with a request to `url`.
    public func matches(_ url: URLParts, at now: Date) -> Bool {
        guard !isExpired(at: now) else { return false }
        if secure && !url.isSecure { return false }
        if hostOnly {
            guard url.host == domain else { return false }
        } else {
            guard Cookies.domainMatches(host: url.host, domain: domain) else { return false }
        }
        return Cookies.pathMatches(requestPath: url.pathOrRoot, cookiePath: path)
    }
}

public enum Cookies {
    /// A registration's jar at most: RFC 6265 §6.1 lets a user agent cap what it keeps.
    public static let maxCookies = 200
    public static let maxJarBytes = 128 * 1024
    /// RFC 6265bis §5.5: `Max-Age` and `Expires` are capped to 400 days.
    public static let maxLifetime: TimeInterval = 400 * 24 * 3600

    /// What parsing one `Set-Cookie` produced.
    public enum Outcome: Sendable, Equatable {
        case store(StoredCookie)
        /// Max-Age <= 0 or an Expires in the past: remove the cookie with this identity.
        case delete(name: String, domain: String, path: String)
        case ignore
    }

    /// RFC 6265 §5.2 and §5.3: a Domain attribute must domain-match the request host and
    /// must not be a public suffix (libpsl's list, as browsers use it); an IP host takes
    /// host-only cookies. Lifetimes are capped at `maxLifetime`.
    public static func parse(_ header: String, from url: URLParts, at now: Date) -> Outcome {
        let parts = header.split(separator: ";", omittingEmptySubsequences: false)
        guard let pair = parts.first, let eq = pair.firstIndex(of: "=") else { return .ignore }
        let name = pair[..<eq].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: eq)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty, name.utf8.count + value.utf8.count <= 4096 else { return .ignore }

        var domainAttribute: String?
        var pathAttribute: String?
        var maxAge: Int?
        var expires: Date?
        var secure = false
        var httpOnly = false
        for attribute in parts.dropFirst() {
            let (key, val): (String, String)
            if let e = attribute.firstIndex(of: "=") {
                key = attribute[..<e].trimmingCharacters(in: .whitespaces).lowercased()
                val = attribute[attribute.index(after: e)...].trimmingCharacters(in: .whitespaces)
            } else {
                key = attribute.trimmingCharacters(in: .whitespaces).lowercased()
                val = ""
            }
            switch key {
            case "domain":
                var d = val.lowercased()
                if d.hasPrefix(".") { d.removeFirst() }
                if !d.isEmpty { domainAttribute = d }
            case "path":
                pathAttribute = val.hasPrefix("/") ? val : nil
            case "max-age":
                if let n = parseMaxAge(val) { maxAge = n }
            case "expires":
                expires = parseHTTPDate(val)
            case "secure":
                secure = true
            case "httponly":
                httpOnly = true
            default:
                break
            }
        }
        if secure && !url.isSecure { return .ignore }

        let hostOnly: Bool
        let domain: String
        if let domainAttribute {
            guard domainMatches(host: url.host, domain: domainAttribute), !isIPAddress(url.host) || url.host == domainAttribute,
                isCookieDomainAcceptable(host: url.host, domain: domainAttribute)
            else { return .ignore }
            hostOnly = url.host == domainAttribute && isIPAddress(url.host)
            domain = domainAttribute
        } else {
            hostOnly = true
            domain = url.host
        }
        let path = pathAttribute ?? defaultPath(url.pathOrRoot)

        var expiresAt: Date?
        if let maxAge {
            expiresAt = maxAge <= 0 ? .distantPast : now.addingTimeInterval(min(TimeInterval(maxAge), maxLifetime))
        } else if let expires {
            expiresAt = min(expires, now.addingTimeInterval(maxLifetime))
        }
        if let expiresAt, expiresAt <= now { return .delete(name: name, domain: domain, path: path) }
        return .store(
            StoredCookie(
                name: name, value: value, domain: domain, path: path, hostOnly: hostOnly, secure: secure,
                httpOnly: httpOnly, expiresAt: expiresAt))
    }

    /// The `Cookie` header for `url`: longer paths first (RFC 6265 §5.4 step 2).
    public static func header(for url: URLParts, from cookies: [StoredCookie], at now: Date) -> String? {
        let matching = cookies.filter { $0.matches(url, at: now) }.sorted { $0.path.utf8.count > $1.path.utf8.count }
        guard !matching.isEmpty else { return nil }
        return matching.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    public static func domainMatches(host: String, domain: String) -> Bool {
        if host == domain { return true }
        // Byte-wise (hosts are ASCII once parsed): `host` ends with "." + domain.
        let h = host.utf8
        let d = domain.utf8
        guard h.count > d.count else { return false }
        return h.suffix(d.count).elementsEqual(d) && h.dropLast(d.count).last == UInt8(ascii: ".") && !isIPAddress(host)
    }

    public static func pathMatches(requestPath: String, cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        let request = requestPath.utf8
        let cookie = cookiePath.utf8
        guard request.count > cookie.count, request.prefix(cookie.count).elementsEqual(cookie) else { return false }
        return cookie.last == UInt8(ascii: "/") || request.dropFirst(cookie.count).first == UInt8(ascii: "/")
    }

    /// RFC 6265 §5.2.2: an optional `-` and digits; more digits than fit count as "very
    /// long" (then capped), anything else leaves the attribute out.
    static func parseMaxAge(_ text: String) -> Int? {
        let negative = text.hasPrefix("-")
        let digits = negative ? text.dropFirst() : Substring(text)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        guard let value = Int(digits) else { return negative ? -1 : Int.max }
        return negative ? -value : value
    }

    /// libpsl's check: `domain` domain-matches `host` and is not a public suffix (`com`,
    /// `co.uk`, a single-label name), unless it is the host itself.
    static func isCookieDomainAcceptable(host: String, domain: String) -> Bool {
        guard let list = psl_builtin() else { return host == domain }
        return psl_is_cookie_domain_acceptable(list, host, domain) == 1
    }

    /// Applies the jar's limits to what one response wants to store: replacing a cookie
    /// is always allowed; a new one only while the jar stays under `maxCookies` and
    /// `maxJarBytes` (expired cookies are dropped first). Returns what to store and
    /// what to delete.
    public static func admit(
        store: [StoredCookie], delete: [(name: String, domain: String, path: String)], existing: [StoredCookie], at now: Date
    ) -> (store: [StoredCookie], delete: [(name: String, domain: String, path: String)]) {
        func identity(_ c: StoredCookie) -> String { "\(c.name)\u{0}\(c.domain)\u{0}\(c.path)" }
        func size(_ c: StoredCookie) -> Int { c.name.utf8.count + c.value.utf8.count + c.domain.utf8.count + c.path.utf8.count }
        var deletes = delete
        var jar: [String: Int] = [:]
        for cookie in existing {
            if cookie.isExpired(at: now) {
                deletes.append((cookie.name, cookie.domain, cookie.path))
            } else {
                jar[identity(cookie)] = size(cookie)
            }
        }
        for gone in delete { jar["\(gone.name)\u{0}\(gone.domain)\u{0}\(gone.path)"] = nil }
        var bytes = jar.values.reduce(0, +)
        var admitted: [StoredCookie] = []
        for cookie in store {
            let id = identity(cookie)
            let previous = jar[id]
            let grown = bytes - (previous ?? 0) + size(cookie)
            guard grown <= maxJarBytes, previous != nil || jar.count < maxCookies else { continue }
            jar[id] = size(cookie)
            bytes = grown
            admitted.append(cookie)
        }
        return (admitted, deletes)
    }

    static func defaultPath(_ path: String) -> String {
        guard path.hasPrefix("/"), let last = path.lastIndex(of: "/"), last != path.startIndex else { return "/" }
        return String(path[..<last])
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.hasPrefix("[") || host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy { UInt8($0) != nil }
    }

    /// RFC 6265 §5.1.1, the cookie-date algorithm: tokens split on delimiters, the first
    /// time, day of month, month and year found win; two-digit years map to 1970–2069.
    /// Works on bytes, never traps, and needs no date formatter.
    static func parseHTTPDate(_ text: String) -> Date? {
        var time: (Int, Int, Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        for token in Array(text.utf8.prefix(256)).split(whereSeparator: isDateDelimiter) {
            if time == nil, let t = dateTime(token) {
                time = t
            } else if day == nil, let d = dateDigits(token, min: 1, max: 2) {
                day = d
            } else if month == nil, let m = dateMonth(token) {
                month = m
            } else if year == nil, let y = dateDigits(token, min: 2, max: 4) {
                year = y
            }
        }
        guard var year, let day, let month, let (hour, minute, second) = time else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, hour <= 23, minute <= 59, second <= 59 else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }

    private static func isDateDelimiter(_ c: UInt8) -> Bool {
        c == 0x09 || (0x20...0x2F).contains(c) || (0x3B...0x40).contains(c) || (0x5B...0x60).contains(c) || (0x7B...0x7E).contains(c)
    }

    /// 1–2 digits `:` 1–2 digits `:` 1–2 digits, then anything not a digit.
    private static func dateTime(_ token: ArraySlice<UInt8>) -> (Int, Int, Int)? {
        var parts: [Int] = []
        var value = 0
        var digits = 0
        for c in token {
            if c >= 0x30 && c <= 0x39 {
                guard digits < 2 else { return nil }
                value = value * 10 + Int(c - 0x30)
                digits += 1
            } else if c == UInt8(ascii: ":"), parts.count < 2, digits > 0 {
                parts.append(value)
                value = 0
                digits = 0
            } else {
                break
            }
        }
        guard parts.count == 2, digits > 0 else { return nil }
        return (parts[0], parts[1], value)
    }

    /// `min`–`max` leading digits, then anything not a digit.
    private static func dateDigits(_ token: ArraySlice<UInt8>, min: Int, max: Int) -> Int? {
        var value = 0
        var count = 0
        for c in token {
            guard c >= 0x30 && c <= 0x39 else { break }
            count += 1
            guard count <= max else { return nil }
            value = value * 10 + Int(c - 0x30)
        }
        return count >= min ? value : nil
    }

    private static func dateMonth(_ token: ArraySlice<UInt8>) -> Int? {
        guard token.count >= 3 else { return nil }
        let name = String(decoding: token.prefix(3), as: UTF8.self).lowercased()
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        return months.firstIndex(of: name).map { $0 + 1 }
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm); year is at most 4 digits here.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

/// A jar's cookies with the `Cookie` headers already worked out, for a jar that is read far
/// more often than it changes (every proxied call reads it). What a header depends on is the
/// request's host, its scheme's security, which of the jar's cookie paths cover the request
/// path, and the time; a header is remembered under the first three and used until the
/// jar's first cookie expires. So a call costs one test per distinct cookie path (a jar of
/// 20 cookies set by one server usually has one or two), not a match of every cookie.
public final class CookieJarIndex: Sendable {
    public let cookies: [StoredCookie]
    /// The distinct cookie paths; a request's mask has bit i set when `paths[i]` covers it.
    private let paths: [String]
    /// Until then no cookie of the jar has expired; nil when none ever does.
    private let firstExpiry: Date?
    private let remembered = Mutex(Remembered())

    /// At most this many headers are remembered (hosts × path masks); beyond, the memory starts over.
    static let maxRemembered = 16
    /// About what the jar holds in memory, its remembered headers included: what a cache of
    /// jars counts against its byte bound.
    public let approximateBytes: Int

    private struct Key: Equatable {
        let host: String
        let secure: Bool
        let mask: UInt64
    }

    /// The headers made so far, by key: the first in place (most jars serve one host and one
    /// path), the others in a short list searched in order — no table per jar.
    private struct Remembered {
        var first: (key: Key, header: String?)?
        var more: [(key: Key, header: String?)] = []

        var count: Int { (first == nil ? 0 : 1) + more.count }

        /// `.some(header)` when `key` was seen (the header may be nil: no cookie matched).
        func header(for key: Key) -> String?? {
            if let first, first.key == key { return .some(first.header) }
            guard let found = more.first(where: { $0.key == key }) else { return nil }
            return .some(found.header)
        }

        mutating func remember(_ header: String?, for key: Key) {
            if first == nil { first = (key, header) } else { more.append((key, header)) }
        }
    }

    public init(_ cookies: [StoredCookie]) {
        self.cookies = cookies
        var seen = Set<String>()
        let distinct = cookies.map(\.path).filter { seen.insert($0).inserted }
        // Most jars' cookies all have `Path=/`: those share one array rather than keep one each.
        paths = distinct == Self.rootPathOnly ? Self.rootPathOnly : distinct
        firstExpiry = cookies.compactMap(\.expiresAt).min()
        let cookieBytes = cookies.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + $1.domain.utf8.count + $1.path.utf8.count + 96 }
        approximateBytes = 256 + cookieBytes * 2
    }

    private static let rootPathOnly = ["/"]

    /// The index of a jar without cookies, shared: most registrations' jars are empty.
    public static let empty = CookieJarIndex([])

    /// The `Cookie` header for `url` at `now`: `Cookies.header(for:from:at:)`, remembered.
    public func header(for url: URLParts, at now: Date) -> String? {
        if cookies.isEmpty { return nil }
        if let firstExpiry, now >= firstExpiry { return Cookies.header(for: url, from: cookies, at: now) }
        guard paths.count <= 64 else { return Cookies.header(for: url, from: cookies, at: now) }
        let requestPath = url.pathOrRoot
        var mask: UInt64 = 0
        for (i, path) in paths.enumerated() where Cookies.pathMatches(requestPath: requestPath, cookiePath: path) {
            mask |= 1 << UInt64(i)
        }
        let key = Key(host: url.host, secure: url.isSecure, mask: mask)
        if let known = remembered.withLock({ $0.header(for: key) }) { return known }
        // Kept with the jar: made to its length (`joined` leaves it room to spare).
        let header = Cookies.header(for: url, from: cookies, at: now)?.compacted
        remembered.withLock { remembered in
            if remembered.count >= Self.maxRemembered { remembered = Remembered() }
            if remembered.header(for: key) == nil { remembered.remember(header, for: key) }
        }
        return header
    }
}

/// Where a registration's cookies are kept (sealed in PostgreSQL by the server).
public protocol CookieRecords: Sendable {
    func cookies(registrationID: String) async throws -> [StoredCookie]
    /// The `Cookie` header for `url` from the registration's jar (`Cookies.header`); a store
    /// that caches the jar answers it from a `CookieJarIndex`.
    func cookieHeader(registrationID: String, for url: URLParts, at now: Date) async throws -> String?
    /// Inserts or replaces by (domain, path, name); deletes the identities given.
    func apply(registrationID: String, store: [StoredCookie], delete: [(name: String, domain: String, path: String)]) async throws
}

extension CookieRecords {
    public func cookieHeader(registrationID: String, for url: URLParts, at now: Date) async throws -> String? {
        Cookies.header(for: url, from: try await cookies(registrationID: registrationID), at: now)
    }
}

/// A registration's cookie jar: RFC 6265 rules over `CookieRecords`.
public struct RegistrationCookieJar: CookieStorage {
    /// Where the cookies are and the clock that ages them, one for many jars: a jar is then an
    /// id and a reference, small enough to sit in an existential's inline buffer (a cached
    /// manager's jar costs no allocation of its own).
    public final class Source: Sendable {
        public let records: any CookieRecords
        public let clock: any WallClock

        public init(records: any CookieRecords, clock: any WallClock) {
            self.records = records
            self.clock = clock
        }
    }

    public let registrationID: String
    public let source: Source
    public var records: any CookieRecords { source.records }
    public var clock: any WallClock { source.clock }

    public init(registrationID: String, source: Source) {
        self.registrationID = registrationID
        self.source = source
    }

    public init(registrationID: String, records: any CookieRecords, clock: any WallClock) {
        self.init(registrationID: registrationID, source: Source(records: records, clock: clock))
    }

    public func cookieHeader(for url: String) async throws -> String? {
        guard let parts = URLParts(url) else { return nil }
        return try await records.cookieHeader(registrationID: registrationID, for: parts, at: clock.now)
    }

    public func store(setCookies: [String], from url: String) async throws {
        guard let parts = URLParts(url) else { return }
        let now = clock.now
        var store: [StoredCookie] = []
        var delete: [(name: String, domain: String, path: String)] = []
        for header in setCookies {
            switch Cookies.parse(header, from: parts, at: now) {
            case .store(let cookie):
                store.removeAll { $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path }
                store.append(cookie)
            case .delete(let name, let domain, let path):
                delete.append((name, domain, path))
            case .ignore:
                break
            }
        }
        guard !store.isEmpty || !delete.isEmpty else { return }
        let existing = try await records.cookies(registrationID: registrationID)
        let admitted = Cookies.admit(store: store, delete: delete, existing: existing, at: now)
        if !admitted.store.isEmpty || !admitted.delete.isEmpty {
            try await records.apply(registrationID: registrationID, store: admitted.store, delete: admitted.delete)
        }
    }
}
