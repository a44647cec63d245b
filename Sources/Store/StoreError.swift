/// An error from the store.
///
/// Match on ``code`` (`error.code == .unavailable`), never on the text. `description` names what
/// failed and, for server errors, the SQLSTATE and constraint; it never carries SQL text, parameter
/// values, server messages (which may quote values) or connection passwords. `debugDescription`
/// adds the server's or libpq's message for logs at debug level.
public struct StoreError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case unavailable
            case uniqueViolation
            case foreignKeyViolation
            case serializationFailure
            case query
            case decoding
            case migration
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The database cannot be reached or the connection broke (SQLSTATE class 08, 57P01…,
        /// 53300, a failed connect, an acquire timeout, a pool that was shut down). Maps to
        /// `503 store_unavailable`.
        public static let unavailable = Code(.unavailable)
        /// SQLSTATE 23505.
        public static let uniqueViolation = Code(.uniqueViolation)
        /// SQLSTATE 23503.
        public static let foreignKeyViolation = Code(.foreignKeyViolation)
        /// SQLSTATE 40001 or 40P01: the transaction may be retried.
        public static let serializationFailure = Code(.serializationFailure)
        /// Any other error the server reported for a statement (syntax, check constraint, …).
        public static let query = Code(.query)
        /// A result column was missing, NULL, or not of the requested type.
        public static let decoding = Code(.decoding)
        /// A migration file or the recorded migrations are not acceptable.
        public static let migration = Code(.migration)

        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// The five-character SQLSTATE when the server reported one.
    public let sqlState: String?
    /// The violated constraint's name, when the server named one.
    public let constraint: String?
    /// A fixed, secret-free phrase chosen by this module (never server or user text).
    private let context: String
    /// libpq's or the server's message; may quote values, so only in `debugDescription`.
    private let detail: String?

    init(code: Code, context: String, sqlState: String? = nil, constraint: String? = nil, detail: String? = nil) {
        self.code = code
        self.context = context
        self.sqlState = sqlState
        self.constraint = constraint
        self.detail = detail
    }

    public var description: String {
        var text = "store error \(code): \(context)"
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let constraint { text += " (constraint \(constraint))" }
        return text
    }

    public var debugDescription: String {
        guard let detail, !detail.isEmpty else { return description }
        return description + ": " + detail.trimmingTrailingWhitespace()
    }
}

extension StoreError {
    static func unavailable(_ context: String, detail: String? = nil, sqlState: String? = nil) -> StoreError {
        StoreError(code: .unavailable, context: context, sqlState: sqlState, detail: detail)
    }

    public static func decoding(_ context: String) -> StoreError {
        StoreError(code: .decoding, context: context)
    }

    static func migration(_ context: String) -> StoreError {
        StoreError(code: .migration, context: context)
    }

    /// Classifies a server error by SQLSTATE. `connectionBroken` wins: whatever the server said, a
    /// connection that is gone means the store is unavailable.
    static func server(
        sqlState: String?, constraint: String?, message: String?, connectionBroken: Bool
    ) -> StoreError {
        let code: Code
        if connectionBroken {
            code = .unavailable
        } else {
            switch sqlState {
            case "23505": code = .uniqueViolation
            case "23503": code = .foreignKeyViolation
            case "40001", "40P01": code = .serializationFailure
            case let s? where s.hasPrefix("08"): code = .unavailable  // connection exception
            case "57P01", "57P02", "57P03": code = .unavailable  // admin/crash shutdown, cannot connect now
            case "53300": code = .unavailable  // too many connections
            case "25006": code = .unavailable  // read-only transaction: a standby after failover
            default: code = .query
            }
        }
        let context: String
        if code != .unavailable {
            context = "statement failed"
        } else if sqlState == "25006", !connectionBroken {
            context = "the database server accepts no writes (a standby, or a primary demoted by a failover)"
        } else {
            context = "connection to the database failed during a statement"
        }
        return StoreError(code: code, context: context, sqlState: sqlState, constraint: constraint, detail: message)
    }
}

extension String {
    func trimmingTrailingWhitespace() -> String {
        var s = Substring(self)
        while let last = s.last, last.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
