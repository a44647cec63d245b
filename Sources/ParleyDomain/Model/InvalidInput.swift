/// Input that breaks a rule of the contract: a field, a query parameter or a cursor.
/// Controllers throw it while decoding, rooms while checking what they were given;
/// `Problem.from` answers every case with `400 invalid_request`.
package enum InvalidInput: Error, Sendable, Equatable {
    /// Empty, longer than `maxBytes`, or with a control character.
    case text(field: String, maxBytes: Int)
    /// Longer than `maxBytes`, or with a control character (device and user fields).
    case printable(field: String, maxBytes: Int)
    /// Not a whole number from 1 to `max`.
    case limit(max: Int)
    /// A paging cursor Parley did not hand out.
    case cursor
    /// Not an RFC 3339 date-time.
    case since
    /// Not a UUID.
    case uuid(field: String)
    /// Not one of the lifecycle event types.
    case eventType

    /// `value` unless it is empty, has control characters (NUL included: PostgreSQL
    /// refuses it, DEL too) or more than `maxBytes` bytes.
    package static func checkedText(_ value: String?, _ field: String, maxBytes: Int = 2048) throws(InvalidInput) -> String? {
        guard let value else { return nil }
        guard !value.isEmpty, value.utf8.count <= maxBytes, !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { throw .text(field: field, maxBytes: maxBytes) }
        return value
    }

    /// `value` unless it has more than `maxBytes` bytes or a character below U+0020.
    package static func checkedPrintable(_ value: String?, _ field: String, maxBytes: Int = 256) throws(InvalidInput) -> String? {
        guard let value else { return nil }
        guard value.utf8.count <= maxBytes, !value.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
            throw .printable(field: field, maxBytes: maxBytes)
        }
        return value
    }
}
