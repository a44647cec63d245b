import Foundation
public import Logging
import Synchronization
import ParleyDomain

/// Parley's log lines, in either format, to standard error or any writer; one handler per
/// logger, as swift-log makes them. Both formats carry the same lines with the same metadata:
/// the handler's own, then the provider's (trace ids), then the call's, later ones winning, and
/// a logged error as `error` unless the line names one itself. Unlike swift-log's
/// `StreamLogHandler`, which formats its metadata again every time a key is set, a line is
/// formatted only when it is written: every request sets its own keys (`hb.request.id`), and at
/// the usual levels most requests write no line at all.
public struct LineLogHandler: LogHandler {
    public enum Format: Sendable {
        /// `PARLEY_LOG_FORMAT=text` (the default): `StreamLogHandler`'s line, `<local time>
        /// <level> <label>: <key=value …, sorted> [<source>] <message>`.
        case text
        /// `PARLEY_LOG_FORMAT=json`: one JSON object per line, for Loki, Elasticsearch and the
        /// like: `time` (RFC 3339, milliseconds, UTC), `level`, `label`, `message`, and every
        /// metadata key of the line as a member of its own (`request.id`, `http.route`,
        /// `http.status`, `duration.ms`, the trace ids when traces are on, …). A metadata key
        /// that would overwrite one of the four is written as `metadata.<key>`.
        case json
    }

    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .info
    let label: String
    let format: Format
    let write: @Sendable ([UInt8]) -> Void

    /// Lines go to `write`, one call per line (the newline included).
    public init(
        label: String, format: Format, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable ([UInt8]) -> Void
    ) {
        self.label = label
        self.format = format
        self.metadataProvider = metadataProvider
        self.write = write
    }

    /// Lines go to standard error, whole lines at a time.
    public static func standardError(label: String, format: Format, metadataProvider: Logger.MetadataProvider? = nil) -> LineLogHandler {
        LineLogHandler(label: label, format: format, metadataProvider: metadataProvider) { StandardErrorLines.shared.write($0) }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        if let error = event.error, merged["error"] == nil { merged["error"] = "\(error)" }
        switch format {
        case .text: write(textLine(event, merged))
        case .json: write(jsonLine(event, merged))
        }
    }

    private func textLine(_ event: LogEvent, _ metadata: Logger.Metadata) -> [UInt8] {
        var line = Self.localTimestamp() + " \(event.level)" + (label.isEmpty ? ":" : " \(label):")
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) { line += " \(key)=\(value)" }
        line += " [\(event.source)] \(event.message)\n"
        return Array(line.utf8)
    }

    private func jsonLine(_ event: LogEvent, _ metadata: Logger.Metadata) -> [UInt8] {
        var members: [String: JSONValue] = [
            "time": .string(Self.timestamp(Date())), "level": .string(event.level.rawValue), "label": .string(label),
            "message": .string(event.message.description),
        ]
        for (key, value) in metadata {
            let name = ["time", "level", "label", "message"].contains(key) ? "metadata." + key : key
            members[name] = Self.json(value)
        }
        return JSONValue.object(members).encoded() + [UInt8(ascii: "\n")]
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

    /// The local time as `StreamLogHandler` writes it (`%Y-%m-%dT%H:%M:%S%z`).
    static func localTimestamp() -> String {
        var now = time(nil)
        var parts = tm()
        guard localtime_r(&now, &parts) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
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
