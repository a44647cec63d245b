import ParleyEncoding
public import struct Foundation.Date
public import struct Foundation.UUID
import ParleyCrypto

/// A PostgreSQL type, by OID, that a bound parameter is declared as.
///
/// `.unknown` lets the server infer the type from context (as a quoted literal would), which is
/// what `String` uses so that it can fill `text`, `jsonb`, `uuid` or enum columns alike.
public struct SQLType: Hashable, Sendable {
    public let oid: UInt32
    public init(oid: UInt32) { self.oid = oid }

    public static let unknown = SQLType(oid: 0)
    public static let bool = SQLType(oid: 16)
    public static let bytea = SQLType(oid: 17)
    public static let int8 = SQLType(oid: 20)
    public static let int2 = SQLType(oid: 21)
    public static let int4 = SQLType(oid: 23)
    public static let text = SQLType(oid: 25)
    public static let oidType = SQLType(oid: 26)
    public static let jsonb = SQLType(oid: 3802)
    public static let float4 = SQLType(oid: 700)
    public static let float8 = SQLType(oid: 701)
    public static let varchar = SQLType(oid: 1043)
    public static let bpchar = SQLType(oid: 1042)
    public static let date = SQLType(oid: 1082)
    public static let timestamp = SQLType(oid: 1114)
    public static let timestamptz = SQLType(oid: 1184)
    public static let numeric = SQLType(oid: 1700)
    public static let uuid = SQLType(oid: 2950)
}

/// A Swift value that can be bound to a statement parameter in PostgreSQL's text format.
public protocol SQLBindable: Sendable {
    /// The type the parameter is declared as.
    static var sqlType: SQLType { get }
    /// The value in PostgreSQL's text input format.
    var sqlText: String { get }
}

extension String: SQLBindable {
    public static var sqlType: SQLType { .unknown }
    public var sqlText: String { self }
}

extension Int: SQLBindable {
    public static var sqlType: SQLType { .int8 }
    public var sqlText: String { String(self) }
}

extension Int64: SQLBindable {
    public static var sqlType: SQLType { .int8 }
    public var sqlText: String { String(self) }
}

extension Int32: SQLBindable {
    public static var sqlType: SQLType { .int4 }
    public var sqlText: String { String(self) }
}

extension Bool: SQLBindable {
    public static var sqlType: SQLType { .bool }
    public var sqlText: String { self ? "true" : "false" }
}

extension Double: SQLBindable {
    public static var sqlType: SQLType { .float8 }
    public var sqlText: String {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return String(self)  // shortest representation that round-trips
    }
}

/// `[UInt8]` binds as `bytea`.
extension Array: SQLBindable where Element == UInt8 {
    public static var sqlType: SQLType { .bytea }
    public var sqlText: String { "\\x" + Hex.encode(self) }
}

extension Date: SQLBindable {
    public static var sqlType: SQLType { .timestamptz }
    /// RFC 3339 in UTC with microseconds, PostgreSQL's own precision.
    public var sqlText: String { TimestampFormat.format(self) }
}

extension UUID: SQLBindable {
    public static var sqlType: SQLType { .uuid }
    public var sqlText: String { uuidString.lowercased() }
}

/// A statement whose interpolated values become `$n` parameters.
///
/// ```swift
/// let rows = try await store.query("SELECT id FROM registrations WHERE destination = \(name)")
/// ```
/// `name` is sent as a parameter, never spliced into the text. Raw SQL has to say so:
/// `\(unsafeSQL: "DESC")` or `SQL(unsafeSQL: script)`.
public struct SQL: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    struct Binding: Sendable {
        let type: SQLType
        let value: String?
    }

    enum Piece: Sendable {
        case raw(String)
        case bind(Binding)
    }

    private(set) var pieces: [Piece]

    /// Raw SQL, sent as written. Never build it from untrusted input.
    public init(unsafeSQL: String) {
        pieces = [.raw(unsafeSQL)]
    }

    public init(stringLiteral value: String) {
        pieces = [.raw(value)]
    }

    public init(stringInterpolation: StringInterpolation) {
        pieces = stringInterpolation.pieces
    }

    /// Appends another statement fragment; its parameters are renumbered.
    public mutating func append(_ other: SQL) {
        pieces.append(contentsOf: other.pieces)
    }

    public static func + (lhs: SQL, rhs: SQL) -> SQL {
        var result = lhs
        result.append(rhs)
        return result
    }

    /// The statement text with `$n` placeholders. Contains no parameter values.
    public var text: String { rendered.text }

    /// How many parameters are bound.
    public var parameterCount: Int {
        pieces.reduce(0) { count, piece in
            if case .bind = piece { count + 1 } else { count }
        }
    }

    /// The statement text, without values.
    public var description: String { text }

    var rendered: (text: String, bindings: [Binding]) {
        var text = ""
        var bindings: [Binding] = []
        for piece in pieces {
            switch piece {
            case .raw(let raw):
                text += raw
            case .bind(let binding):
                bindings.append(binding)
                text += "$\(bindings.count)"
            }
        }
        return (text, bindings)
    }

    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        var pieces: [Piece] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            pieces.reserveCapacity(interpolationCount * 2 + 1)
        }

        public mutating func appendLiteral(_ literal: String) {
            if !literal.isEmpty { pieces.append(.raw(literal)) }
        }

        /// Binds `value` as a parameter.
        public mutating func appendInterpolation<Value: SQLBindable>(_ value: Value) {
            pieces.append(.bind(Binding(type: Value.sqlType, value: value.sqlText)))
        }

        /// Binds `value` as a parameter; `nil` becomes `NULL` (declared with `Value`'s type).
        public mutating func appendInterpolation<Value: SQLBindable>(_ value: Value?) {
            pieces.append(.bind(Binding(type: Value.sqlType, value: value?.sqlText)))
        }

        /// Splices another statement fragment in, renumbering its parameters.
        public mutating func appendInterpolation(_ fragment: SQL) {
            pieces.append(contentsOf: fragment.pieces)
        }

        /// Splices raw SQL in. Never pass untrusted input.
        public mutating func appendInterpolation(unsafeSQL raw: String) {
            pieces.append(.raw(raw))
        }
    }
}

/// RFC 3339 timestamps with microseconds, in UTC, without Foundation's formatters (which stop at
/// milliseconds and are not cheap to share across threads).
enum TimestampFormat {
    /// The range bound: years 1 to 9999. A date outside it (an upstream's absurd lifetime)
    /// is stored as the nearest end, never trapped on.
    static let minMicros: Int64 = -62_135_596_800_000_000
    static let maxMicros: Int64 = 253_402_300_799_999_999

    static func format(_ date: Date) -> String {
        let raw = (date.timeIntervalSince1970 * 1_000_000).rounded()
        let micros: Int64 =
            raw.isFinite ? (raw <= Double(minMicros) ? minMicros : raw >= Double(maxMicros) ? maxMicros : Int64(raw)) : 0
        let (seconds, fraction) = floorDivMod(micros, 1_000_000)
        let (days, secondOfDay) = floorDivMod(seconds, 86_400)
        let (year, month, day) = civil(fromDays: days)
        var text = ""
        let bc = year <= 0
        text += pad(bc ? 1 - year : year, 4)
        text += "-" + pad(month, 2) + "-" + pad(day, 2)
        text += "T" + pad(secondOfDay / 3600, 2) + ":" + pad(secondOfDay / 60 % 60, 2) + ":" + pad(secondOfDay % 60, 2)
        text += "." + pad(fraction, 6) + "Z"
        if bc { text += " BC" }
        return text
    }

    /// Parses PostgreSQL's ISO output of `timestamptz` (`2024-05-06 07:08:09.123456+00`,
    /// `+05:30`, ` BC`), `timestamp` (taken as UTC) and `date`.
    static func parse(_ text: String) -> Date? {
        switch text {
        case "infinity": return .distantFuture
        case "-infinity": return .distantPast
        default: break
        }
        var s = Substring(text)
        var bc = false
        if s.hasSuffix(" BC") {
            bc = true
            s = s.dropLast(3)
        }
        let bytes = Array(s.utf8)
        var i = 0
        func number(maxDigits: Int = .max) -> Int64? {
            var value: Int64 = 0
            var digits = 0
            while i < bytes.count, digits < maxDigits, bytes[i] >= 48, bytes[i] <= 57 {
                value = value * 10 + Int64(bytes[i] - 48)
                i += 1
                digits += 1
            }
            return digits == 0 ? nil : value
        }
        func expect(_ c: Character) -> Bool {
            guard i < bytes.count, bytes[i] == c.asciiValue! else { return false }
            i += 1
            return true
        }
        guard var year = number(), expect("-"), let month = number(maxDigits: 2), expect("-"),
            let day = number(maxDigits: 2), (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        if bc { year = 1 - year }
        var secondOfDay: Int64 = 0
        var micros: Int64 = 0
        var offset: Int64 = 0
        if i < bytes.count {
            guard expect(" ") || expect("T"), let h = number(maxDigits: 2), expect(":"),
                let m = number(maxDigits: 2), expect(":"), let sec = number(maxDigits: 2)
            else { return nil }
            secondOfDay = h * 3600 + m * 60 + sec
            if expect(".") {
                let start = i
                guard let f = number(maxDigits: 6) else { return nil }
                var scale = 6 - (i - start)
                micros = f
                while scale > 0 {
                    micros *= 10
                    scale -= 1
                }
                while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 { i += 1 }  // beyond microseconds
            }
            if i < bytes.count {
                if expect("Z") {
                    offset = 0
                } else {
                    let sign: Int64
                    if expect("+") { sign = 1 } else if expect("-") { sign = -1 } else { return nil }
                    guard let oh = number(maxDigits: 2) else { return nil }
                    var om: Int64 = 0
                    var os: Int64 = 0
                    if expect(":") {
                        guard let v = number(maxDigits: 2) else { return nil }
                        om = v
                        if expect(":") {
                            guard let v = number(maxDigits: 2) else { return nil }
                            os = v
                        }
                    }
                    offset = sign * (oh * 3600 + om * 60 + os)
                }
            }
        }
        guard i == bytes.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + secondOfDay - offset
        return Date(timeIntervalSince1970: Double(seconds) + Double(micros) / 1_000_000)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b
        var r = a % b
        if r < 0 {
            q -= 1
            r += b
        }
        return (q, r)
    }

    // Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian calendar).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
