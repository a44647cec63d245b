import ParleyDomain
import Synchronization
import Testing

/// `RefreshPace`: refreshes ahead of need run as many at a time as the server keeps answering
/// as fast, and fewer as soon as it slows down, throttles, or requests wait for the database.
@Suite struct RefreshPaceTests {
    /// `rounds` rounds of answers, each as many as the limit, all taking `latency`.
    static func run(_ pace: RefreshPace, rounds: Int, latency: Duration) {
        for _ in 0..<rounds {
            for _ in 0..<pace.limit { pace.finished(.answered(latency: latency)) }
        }
    }

    @Test func aServerThatKeepsUpGetsMoreUpToTheCeiling() {
        let pace = RefreshPace()
        #expect(pace.limit == RefreshPace.start)
        Self.run(pace, rounds: 10, latency: .milliseconds(200))
        #expect((RefreshPace.start + 9...RefreshPace.start + 10).contains(pace.limit), "about one more per round of answers as fast as the quickest: \(pace.limit)")
        Self.run(pace, rounds: 100, latency: .milliseconds(200))
        #expect(pace.limit == RefreshPace.ceiling)
    }

    @Test func aServerThatSlowsDownGetsFewer() {
        let pace = RefreshPace()
        Self.run(pace, rounds: 20, latency: .milliseconds(20))
        let before = pace.limit
        // A whole round of answers three times as slow: a fifth less, once for the round.
        Self.run(pace, rounds: 1, latency: .milliseconds(60))
        #expect((Int(Double(before) * 0.8)...Int(Double(before + 1) * 0.8)).contains(pace.limit), "\(before) → \(pace.limit)")
        // Slow for good: down towards the floor, never below it.
        Self.run(pace, rounds: 60, latency: .milliseconds(60))
        #expect(pace.limit < before / 4)
        #expect(pace.limit >= RefreshPace.floor)
        // A server that stays slow becomes the new quickest (0.1 % an answer), and the pace grows again.
        Self.run(pace, rounds: 1000, latency: .milliseconds(60))
        #expect(pace.limit > RefreshPace.start)
    }

    @Test func throttlingHalvesOncePerRound() {
        let pace = RefreshPace()
        Self.run(pace, rounds: 30, latency: .milliseconds(10))
        let before = pace.limit
        #expect(before > 30)
        // A burst of 429s for every refresh in flight, from one crowded moment: half, once.
        for _ in 0..<before { pace.finished(.throttled) }
        #expect(pace.limit == before / 2)
        // The refreshes sent at the new pace throttled too: less again.
        for _ in 0..<before / 2 { pace.finished(.throttled) }
        #expect(pace.limit <= before / 4)
        for _ in 0..<1000 { pace.finished(.throttled) }
        #expect(pace.limit == RefreshPace.floor)
    }

    @Test func requestsWaitingForTheDatabaseSlowItDown() {
        let pressed = Mutex(false)
        let pace = RefreshPace(pressed: { pressed.withLock { $0 } })
        Self.run(pace, rounds: 30, latency: .milliseconds(10))
        let before = pace.limit
        pressed.withLock { $0 = true }
        let pressedOnce = pace.limit
        #expect((Int(Double(before) * 0.8)...Int(Double(before + 1) * 0.8)).contains(pressedOnce), "a fifth less while requests wait")
        #expect(pace.limit == pressedOnce, "and not again before the refreshes in flight have answered")
        for _ in 0..<before { pace.finished(.answered(latency: .milliseconds(10))) }
        #expect(pace.limit < pressedOnce, "still pressed after a round: less again")
        pressed.withLock { $0 = false }
        let released = pace.limit
        Self.run(pace, rounds: 3, latency: .milliseconds(10))
        #expect(pace.limit > released)
    }
}
