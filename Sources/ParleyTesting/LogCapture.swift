public import Logging
import Synchronization

/// An in-memory log handler: every line, with its metadata, for tests that check
/// what Parley writes to its logs (no secrets, the right keys).
public final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    public var all: [String] { lines.withLock { $0 } }

    public func logger(label: String = "parley", level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: label) { label in Handler(label: label, capture: self) }
        logger.logLevel = level
        return logger
    }

    func append(_ line: String) { lines.withLock { $0.append(line) } }

    struct Handler: LogHandler {
        let label: String
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var all = metadata
            for (k, v) in event.metadata ?? [:] { all[k] = v }
            let meta = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            capture.append("\(event.level) \(label) \(event.message) \(meta)")
        }
    }
}
