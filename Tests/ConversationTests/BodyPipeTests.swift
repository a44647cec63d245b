import Conversation
import Synchronization
import Testing

/// A body that passes through once: the writer waits for room, the reader for bytes, and
/// a closed pipe never holds its writer.
@Suite struct BodyPipeTests {
    /// Reads up to `count` bytes, or what the pipe says instead.
    private func read(_ pipe: BodyPipe, _ count: Int, woken: Wakes? = nil) -> (BodyPipe.Read, [UInt8]) {
        var bytes = [UInt8](repeating: 0, count: count)
        let result = bytes.withUnsafeMutableBytes { pipe.read(into: $0, wake: { woken?.bump() }) }
        if case .bytes(let n) = result { return (result, Array(bytes.prefix(n))) }
        return (result, [])
    }

    final class Wakes: Sendable {
        private let count = Mutex(0)
        func bump() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    private func until(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            try #require(ContinuousClock.now < deadline, "timed out waiting for \(what)")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test func theReaderGetsTheBytesInOrderAcrossBatchesThenTheEnd() async throws {
        let pipe = BodyPipe(capacity: 1 << 20)
        #expect(await pipe.write([1, 2, 3]))
        #expect(await pipe.write([4, 5]))
        let (first, a) = read(pipe, 4)
        #expect(first == .bytes(4) && a == [1, 2, 3, 4])
        let (second, b) = read(pipe, 4)
        #expect(second == .bytes(1) && b == [5])
        let woken = Wakes()
        #expect(read(pipe, 4, woken: woken).0 == BodyPipe.Read.wait)
        pipe.finish()
        #expect(woken.value == 1, "the end wakes a waiting reader")
        #expect(read(pipe, 4).0 == BodyPipe.Read.end)
        #expect(pipe.taken == 5)
    }

    @Test func theWriterWaitsForRoomAndTheReaderMakesIt() async throws {
        let pipe = BodyPipe(capacity: 8)
        let woken = Wakes()
        #expect(read(pipe, 4, woken: woken).0 == BodyPipe.Read.wait)
        let writer = Task { await pipe.write([UInt8](repeating: 7, count: 10)) }
        try await until("the writer to wait for room") { pipe.writerWaits }
        #expect(woken.value == 1, "a batch wakes a waiting reader")
        let (got, bytes) = read(pipe, 4)
        #expect(got == .bytes(4) && bytes == [7, 7, 7, 7])
        #expect(await writer.value == true, "room below the capacity lets the writer go on")
        #expect(!pipe.writerWaits)
    }

    @Test func aFailedBodyFailsTheReaderEvenWithBytesWaiting() async throws {
        let pipe = BodyPipe(capacity: 1 << 20)
        await pipe.write([1, 2, 3])
        pipe.fail()
        #expect(read(pipe, 4).0 == BodyPipe.Read.failed)
        #expect(await pipe.write([4]) == false)
    }

    /// The transfer is over (or never started): a waiting writer goes on, later batches are
    /// dropped at once, and a reader that still asks gets a failure, never a short body.
    @Test func closingFreesAWaitingWriterAndDropsTheRest() async throws {
        let pipe = BodyPipe(capacity: 4)
        let writer = Task { await pipe.write([UInt8](repeating: 1, count: 6)) }
        try await until("the writer to wait for room") { pipe.writerWaits }
        pipe.close()
        #expect(await writer.value == true)
        #expect(await pipe.write([UInt8](repeating: 2, count: 100)) == false, "a closed pipe takes nothing")
        #expect(read(pipe, 4).0 == BodyPipe.Read.failed)
        pipe.close()
    }
}
