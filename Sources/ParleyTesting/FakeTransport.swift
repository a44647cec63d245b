public import Conversation
public import Foundation
import Synchronization

/// An in-memory `Transport`: answers with a handler and records every request.
public final class FakeTransport: Transport {
    public typealias Handler = @Sendable (UpstreamRequest) async throws -> UpstreamResponse

    private let handler: Handler
    private let log = Mutex<[UpstreamRequest]>([])

    public init(handler: @escaping Handler) { self.handler = handler }

    public func send(_ request: UpstreamRequest) async throws -> UpstreamResponse {
        log.withLock { $0.append(request) }
        return try await handler(request)
    }

    public var requests: [UpstreamRequest] { log.withLock { $0 } }
}

/// A wall clock that moves only when a test says so.
public final class TestClock: WallClock {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    public var now: Date { current.withLock { $0 } }

    public func advance(by duration: Duration) {
        let parts = duration.components
        current.withLock { $0 += Double(parts.seconds) + Double(parts.attoseconds) / 1e18 }
    }
}

extension UpstreamResponse {
    /// A response whose body is the UTF-8 text given.
    public static func text(_ status: Int, _ text: String = "", headers: HeaderFields = [:]) -> UpstreamResponse {
        UpstreamResponse(status: status, headers: headers, body: .bytes(Array(text.utf8)))
    }
}
