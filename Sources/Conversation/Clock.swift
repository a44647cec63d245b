public import Foundation

/// Wall-clock time, injected so that expiry logic is testable. Logic never calls `Date()`.
public protocol WallClock: Sendable {
    var now: Date { get }
}

public struct SystemClock: WallClock {
    public init() {}
    public var now: Date { Date() }
}
