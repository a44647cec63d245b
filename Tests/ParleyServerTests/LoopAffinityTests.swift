import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTesting
import LoopAffinity
import NIOCore
import NIOPosix
import ParleyDomain
@testable import ParleyServer
import Testing

/// Where a connection's work runs: with `PARLEY_TASKS_ON_EVENT_LOOPS` on the event loop that
/// owns the connection, also after a resumption from a thread that is no event loop (as the
/// curl thread resumes a proxied request), in a process that did not make the loops Swift's
/// global executor (a statically linked `parley` cannot: its runtime hook is not exported).
@Suite struct LoopAffinityTests {
    /// Answers "<on a loop before> <on a loop after> <the same loop>" around a continuation
    /// resumed from a plain thread.
    static func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.get("/where") { _, _ -> String in
            let before = MultiThreadedEventLoopGroup.currentEventLoop.map { ObjectIdentifier($0) }
            await withCheckedContinuation { (resumed: CheckedContinuation<Void, Never>) in
                Thread { resumed.resume() }.start()
            }
            let after = MultiThreadedEventLoopGroup.currentEventLoop.map { ObjectIdentifier($0) }
            return "\(before != nil) \(after != nil) \(before == after)"
        }
        return router
    }

    static func answers(_ server: HTTPServerBuilder) async throws -> [String] {
        let app = Application(router: router(), server: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            var answers: [String] = []
            for _ in 0..<8 {
                answers.append(String(buffer: try await client.execute(uri: "/where", method: .get).body))
            }
            return answers
        }
    }

    @Test func aConnectionsWorkStaysOnTheLoopThatOwnsIt() async throws {
        let answers = try await Self.answers(.http1OnItsLoop(configuration: .init()))
        #expect(answers == Array(repeating: "true true true", count: 8))
    }

    /// The control: without the preference the same handler runs on Swift's pool, so the
    /// test above can tell the two apart.
    @Test func withoutThePreferenceTheWorkLeavesTheLoops() async throws {
        let answers = try await Self.answers(.http1(configuration: .init()))
        #expect(answers.allSatisfy { $0.hasPrefix("false false") })
    }
}
