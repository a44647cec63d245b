import Foundation

/// Runs blocking test I/O on a thread of its own, so a long exchange (a 500 MiB
/// upload) never holds a thread the server under test needs (NIO's shared
/// blocking pool has one thread per core).
public func runOnOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
}
