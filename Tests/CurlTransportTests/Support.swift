import ParleyEncoding
import Conversation
import CurlTransport
import Foundation
import Logging
import ParleyCrypto
import Testing
import UpstreamSimulator

#if canImport(Glibc)
import Glibc
#endif

/// Captures log records in memory so tests can check what was (not) logged.
final class MemoryLogHandler: LogHandler, @unchecked Sendable {
    final class Store: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        func append(_ line: String) {
            lock.lock()
            lines.append(line)
            lock.unlock()
        }
        var all: [String] {
            lock.lock()
            defer { lock.unlock() }
            return lines
        }
    }

    let store: Store
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    init(store: Store) { self.store = store }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = self.metadata.merging(event.metadata ?? [:]) { _, new in new }
        let rendered = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        store.append("\(event.level) \(event.message) \(rendered)")
    }
}

enum Fixtures {
    static var quietLogger: Logger {
        var logger = Logger(label: "curl-transport-tests")
        logger.logLevel = .warning
        return logger
    }

    /// For the in-process simulator. Cancelling it at the end of a test makes Hummingbird
    /// log "Already closed"/CancellationError at error level, which is expected noise.
    static var simulatorLogger: Logger {
        var logger = Logger(label: "upstream-simulator")
        logger.logLevel = .critical
        return logger
    }

    static func transport(_ configuration: CurlTransport.Configuration = .init(), logger: Logger = quietLogger)
        -> CurlTransport
    {
        CurlTransport(configuration: configuration, logger: logger)
    }

    /// Runs `body` with a simulator on a free port and a fresh transport, shut down afterwards.
    static func withSimulatorAndTransport<T>(
        _ configuration: CurlTransport.Configuration = .init(),
        logger: Logger = quietLogger,
        _ body: (_ base: String, _ state: SimulatorState, _ transport: CurlTransport) async throws -> T
    ) async throws -> T {
        try await withRunningSimulator(logger: simulatorLogger) { port, state in
            let transport = transport(configuration, logger: logger)
            defer { transport.shutdown() }
            return try await body("http://127.0.0.1:\(port)", state, transport)
        }
    }

    struct Echo: Decodable {
        let method: String
        let path: String
        let query: String
        let headers: [String: [String]]
        let bodyBytes: Int
        let bodySha256: String
    }

    struct Upload: Decodable {
        let bytes: Int
        let sha256: String
    }

    static func decode<T: Decodable>(_ type: T.Type, _ response: UpstreamResponse) async throws -> T {
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return try JSONDecoder().decode(T.self, from: Data(bytes))
    }

    /// Resident set size of this process, from /proc/self/statm.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The simulator's big-file pattern (byte i = i % 251), hashed here independently.
    static func patternDigest(bytes total: Int) -> String {
        let block = (0..<(251 * 1024)).map { UInt8($0 % 251) }
        let hasher = SHA256Hasher()
        var remaining = total
        block.withUnsafeBytes { raw in
            while remaining > 0 {
                let n = min(remaining, raw.count)
                hasher.update(UnsafeRawBufferPointer(rebasing: raw[0..<n]))
                remaining -= n
            }
        }
        return Hex.encode(hasher.finalize())
    }

    /// Asserts that `body` throws a `TransportError` with `code`.
    static func expectTransportError(
        _ code: TransportError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("expected TransportError(\(code)), got success", sourceLocation: sourceLocation)
        } catch let error as TransportError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected TransportError(\(code)), got \(error)", sourceLocation: sourceLocation)
        }
    }
}

/// For measurements worth reading in the test log.
func report(_ line: String) {
    print("[measure] \(line)")
}
