public import ServiceLifecycle
public import UnixSignals

/// Hears the stop signal before the HTTP server drains: the server is the first service
/// to stop and waits for what it holds, so long-polls must be told at the signal itself
/// (they answer with the flow's state, and the client asks again elsewhere).
public struct ShutdownNotice: Service, CustomStringConvertible {
    let signals: [UnixSignal]
    let notice: @Sendable () -> Void
    public var description: String { "ShutdownNotice" }

    public init(signals: [UnixSignal] = [.sigterm, .sigint], _ notice: @escaping @Sendable () -> Void) {
        self.signals = signals
        self.notice = notice
    }

    public func run() async throws {
        let heard = await cancelWhenGracefulShutdown {
            for await _ in await UnixSignalsSequence(trapping: signals) { return true }
            return false
        }
        if heard == true { notice() }
        // A service that returns early ends its group: stay until the group stops.
        try? await gracefulShutdown()
    }
}

/// Runs until graceful shutdown, then releases a resource (the libcurl transport).
public struct ShutdownHook: Service, CustomStringConvertible {
    let name: String
    public var description: String { "ShutdownHook(\(name))" }
    let action: @Sendable () async -> Void

    public init(name: String, action: @escaping @Sendable () async -> Void) {
        self.name = name
        self.action = action
    }

    public func run() async throws {
        try? await gracefulShutdown()
        await action()
    }
}
