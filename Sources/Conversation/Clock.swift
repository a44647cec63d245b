public import Foundation

/// Wall-clock time, injected so that expiry logic is testable. Logic never calls `Date()`.
public protocol WallClock: Sendable {
    var now: Date { get }
}

extension Duration {
    /// The duration in seconds, for arithmetic with `Date` (`addingTimeInterval`, `timeIntervalSince`).
    public var timeInterval: TimeInterval {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}

public struct SystemClock: WallClock {
    public init() {}
    public var now: Date { Date() }
}
