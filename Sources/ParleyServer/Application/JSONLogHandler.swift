import Foundation
public import Logging
import Synchronization

/// `PARLEY_LOG_FORMAT=json`: one JSON object per line, for Loki, Elasticsearch and the like:
/// `time` (RFC 3339, milliseconds, UTC), `level`, `label`, `message`, and every metadata key of the
/// line as a member of its own (`request.id`, `http.route`, `http.status`, `duration.ms`, the trace
/// ids when traces are on, …). A metadata key that would overwrite one of the four is written as
/// `metadata.<key>`. The same lines, with the same metadata, as the text format: nothing is logged
/// here that is not logged there.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .info
    let label: String
    let write: @Sendable ([UInt8]) -> Void

    /// Lines go to `write`, one call per line (the newline included).
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable ([UInt8]) -> Void) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    /// Lines go to standard error, whole lines at a time.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider? = nil) -> JSONLogHandler {
        JSONLogHandler(label: label, metadataProvider: metadataProvider) { StandardErrorLines.shared.write($0) }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        var members: [String: JSONValue] = [
            "time": .string(Self.timestamp(Date())), "level": .string(event.level.rawValue), "label": .string(label),
            "message": .string(event.message.description),
        ]
        if let error = event.error, merged["error"] == nil { merged["error"] = "\(error)" }
        for (key, value) in merged {
            let name = ["time", "level", "label", "message"].contains(key) ? "metadata." + key : key
            members[name] = Self.json(value)
        }
        write(JSONValue.object(members).encoded() + [UInt8(ascii: "\n")])
    }

    static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let members): .object(members.mapValues(json))
        }
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt))
    }
}

/// Standard error, one whole line per write, lines of concurrent loggers never interleaved.
final class StandardErrorLines: Sendable {
    static let shared = StandardErrorLines()
    private let lock = Mutex(())

    func write(_ line: [UInt8]) {
        lock.withLock { _ in
            line.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = Foundation.write(2, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
                    if written <= 0 { return }  // stderr closed or failing: the line is lost, nothing else
                    offset += written
                }
            }
        }
    }
}
