import ParleyEncoding
public import struct Foundation.Date
public import struct Foundation.UUID
import ParleyCrypto

/// The column names and types of a result, shared by all its rows.
final class RowDescription: Sendable {
    let names: [String]
    let types: [SQLType]
    private let index: [String: Int]

    init(names: [String], types: [SQLType]) {
        self.names = names
        self.types = types
        var index: [String: Int] = [:]
        for (i, name) in names.enumerated() where index[name] == nil { index[name] = i }
        self.index = index
    }

    func position(of column: String) -> Int? { index[column] }
}

/// One result row, in PostgreSQL's text format, read through typed accessors.
///
/// Accessors throw a ``StoreError`` with code ``StoreError/Code/decoding`` when the column is
/// missing, `NULL` (for the non-optional variants) or of another type. The error names the column
/// and its type, never the value.
public struct Row: Sendable {
    let description: RowDescription
    let values: [String?]

    init(description: RowDescription, values: [String?]) {
        self.description = description
        self.values = values
    }

    /// The result's column names, in order.
    public var columnNames: [String] { description.names }

    public func isNull(_ column: String) throws -> Bool {
        try raw(column).value == nil
    }

    // MARK: text

    /// The column's text representation; works for every type.
    public func string(_ column: String) throws -> String {
        try required(column, optionalString(column))
    }

    public func optionalString(_ column: String) throws -> String? {
        try raw(column).value
    }

    // MARK: integers

    public func int(_ column: String) throws -> Int { try required(column, optionalInt(column)) }

    public func optionalInt(_ column: String) throws -> Int? {
        try optionalInteger(column, as: Int.self)
    }

    public func int64(_ column: String) throws -> Int64 { try required(column, optionalInt64(column)) }

    public func optionalInt64(_ column: String) throws -> Int64? {
        try optionalInteger(column, as: Int64.self)
    }

    public func int32(_ column: String) throws -> Int32 { try required(column, optionalInt32(column)) }

    public func optionalInt32(_ column: String) throws -> Int32? {
        try optionalInteger(column, as: Int32.self)
    }

    // MARK: other scalars

    public func bool(_ column: String) throws -> Bool { try required(column, optionalBool(column)) }

    public func optionalBool(_ column: String) throws -> Bool? {
        try typed(column, "Bool", accepting: [.bool]) { text in
            switch text {
            case "t": true
            case "f": false
            default: nil
            }
        }
    }

    public func double(_ column: String) throws -> Double { try required(column, optionalDouble(column)) }

    public func optionalDouble(_ column: String) throws -> Double? {
        try typed(column, "Double", accepting: [.float8, .float4, .numeric, .int2, .int4, .int8]) { text in
            switch text {
            case "NaN": .nan
            case "Infinity": .infinity
            case "-Infinity": -.infinity
            default: Double(text)
            }
        }
    }

    /// A `bytea` column.
    public func bytes(_ column: String) throws -> [UInt8] { try required(column, optionalBytes(column)) }

    public func optionalBytes(_ column: String) throws -> [UInt8]? {
        try typed(column, "[UInt8]", accepting: [.bytea], Row.decodeByteaHex)
    }

    /// A `timestamptz`, `timestamp` (taken as UTC) or `date` column.
    public func date(_ column: String) throws -> Date { try required(column, optionalDate(column)) }

    public func optionalDate(_ column: String) throws -> Date? {
        try typed(column, "Date", accepting: [.timestamptz, .timestamp, .date], TimestampFormat.parse)
    }

    public func uuid(_ column: String) throws -> UUID { try required(column, optionalUUID(column)) }

    public func optionalUUID(_ column: String) throws -> UUID? {
        try typed(column, "UUID", accepting: [.uuid], UUID.init(uuidString:))
    }

    // MARK: helpers

    private func raw(_ column: String) throws -> (value: String?, type: SQLType) {
        guard let i = description.position(of: column) else {
            throw StoreError.decoding("the result has no column \"\(column)\"")
        }
        return (values[i], description.types[i])
    }

    private func required<T>(_ column: String, _ value: T?) throws -> T {
        guard let value else { throw StoreError.decoding("column \"\(column)\" is NULL") }
        return value
    }

    private func typed<T>(
        _ column: String, _ swiftType: String, accepting types: Set<SQLType>, _ parse: (String) -> T?
    ) throws -> T? {
        let (value, type) = try raw(column)
        guard types.contains(type) else {
            throw StoreError.decoding("column \"\(column)\" has type oid \(type.oid), which does not decode as \(swiftType)")
        }
        guard let value else { return nil }
        guard let parsed = parse(value) else {
            throw StoreError.decoding("column \"\(column)\" (type oid \(type.oid)) holds a value that does not decode as \(swiftType)")
        }
        return parsed
    }

    private func optionalInteger<T: FixedWidthInteger>(_ column: String, as: T.Type) throws -> T? {
        try typed(column, "\(T.self)", accepting: [.int2, .int4, .int8, .oidType]) { T($0) }
    }

    /// Decodes `bytea`'s hex output format, `\x0a1b…`.
    static func decodeByteaHex(_ text: String) -> [UInt8]? {
        guard text.hasPrefix("\\x") else { return nil }
        return Hex.decode(String(text.dropFirst(2)))
    }
}
