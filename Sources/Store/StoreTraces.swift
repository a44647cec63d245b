import Tracing

/// A span per store call made inside a traced request (docs/operations.md "Traces"), named by the statement's operation
/// and first table ("SELECT registrations"): from the statement's literal text only, never
/// a bound parameter.
enum StoreTrace {
    static func run<T>(
        _ sql: SQL?, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async throws -> T {
        // Only inside a traced request: migrations and background work open no root spans.
        guard ServiceContext.current != nil else { return try await body() }
        let span = startSpan("db", ofKind: .client)
        defer { span.end() }
        if span.isRecording {
            let (operation, table) = sql.map(\.traceSummary) ?? ("transaction", nil)
            span.operationName = table.map { "\(operation) \($0)" } ?? operation
            span.updateAttributes { attributes in
                attributes["db.system"] = "postgresql"
                attributes["db.operation.name"] = operation
                if let table { attributes["db.collection.name"] = table }
            }
        }
        do {
            return try await body()
        } catch {
            span.recordError(StoreTraceError(type: String(describing: type(of: error))))
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }
}

/// What a failed store span records: the error's type, not its text (which can quote values).
struct StoreTraceError: Error, CustomStringConvertible {
    let type: String
    var description: String { type }
}

extension SQL {
    /// The statement's first keyword and the table after its first FROM, INTO or UPDATE.
    var traceSummary: (operation: String, table: String?) {
        var literal = ""
        for piece in pieces {
            if case .raw(let text) = piece { literal += text } else { literal += " $ " }
            if literal.utf8.count > 512 { break }
        }
        let words = literal.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_" || $0 == ".") })
        guard let first = words.first else { return ("statement", nil) }
        let operation = first.uppercased()
        var table: String?
        for (index, word) in words.enumerated() where ["FROM", "INTO", "UPDATE"].contains(word.uppercased()) {
            if index + 1 < words.count { table = String(words[index + 1].prefix(64)).lowercased() }
            break
        }
        return (String(operation.prefix(16)), table)
    }
}
