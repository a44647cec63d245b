import Foundation
import NIOCore
import Testing

import ParleyDomain
@testable import ParleyServer

/// The per-registration in-flight cap and the spool's disk quota, as objects.
@Suite struct ResourceLimitTests {
    @Test func inFlightTicketsAreCappedAndGivenBackOnce() throws {
        let limits = InFlightLimits(perRegistration: 2)
        let registration = UUID().uuidString
        let first = try limits.admit(key: registration)
        var second: InFlightTicket? = try limits.admit(key: registration)
        #expect(throws: Problem.self) { try limits.admit(key: registration) }
        #expect(limits.count(key: UUID().uuidString) == 0)
        first.release()
        first.release()  // once only
        #expect(limits.count(key: registration) == 1)
        _ = second
        second = nil  // a dropped response gives its slot back
        #expect(limits.count(key: registration) == 0)
        _ = try limits.admit(key: registration)
    }

    static func chunks(_ sizes: [Int]) -> AsyncStream<ByteBuffer> {
        AsyncStream { continuation in
            for size in sizes { continuation.yield(ByteBuffer(repeating: 7, count: size)) }
            continuation.finish()
        }
    }

    @Test func spoolFilesHaveNoNameAndCountAgainstTheQuota() async throws {
        let directory = NSTemporaryDirectory() + "parley-spool-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = Spool(directory: directory, quotaBytes: 3 << 20)

        // A chunked body past memory: its start is read, the rest streams into a nameless file.
        func spooled(_ sizes: [Int]) async throws -> SpooledBody {
            var rest = Self.chunks(sizes).makeAsyncIterator()
            let first = try await SpooledBody.readStart(&rest, memoryLimit: 1024, limit: 1 << 30)
            #expect(first.count == sizes[0])
            let streaming = try await StreamingSpool.start(length: nil, first: first.count, spool: spool)
            do {
                try await streaming.run(rest, first: first, limit: 1 << 30)
            } catch {
                streaming.spooled.remove()
                throw error
            }
            return streaming.spooled
        }
        let body = try await spooled([1 << 20, 1 << 20])
        #expect(body.body.length == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
        #expect(spool.usedBytes == 2 << 20)

        // A second body would pass the quota: 413 with Retry-After, and nothing is held.
        await #expect(throws: Problem.self) { _ = try await spooled([1 << 20, 1 << 20]) }
        #expect(spool.usedBytes == 2 << 20)
        body.remove()
        #expect(spool.usedBytes == 0)
        // Small bodies are read whole into memory and take no quota.
        var small = Self.chunks([60, 40]).makeAsyncIterator()
        #expect(try await SpooledBody.readStart(&small, memoryLimit: 1024, limit: 1 << 30) == [UInt8](repeating: 7, count: 100))
        await #expect(throws: Problem.self) {
            var tooLong = Self.chunks([60, 40]).makeAsyncIterator()
            _ = try await SpooledBody.readStart(&tooLong, memoryLimit: 1024, limit: 99)
        }
        #expect(spool.usedBytes == 0)
    }

    /// A batch's write, as the gathering task waits for it: done before the wait or after,
    /// the wait returns once; a failed write throws its problem.
    @Test func aBatchWriteWakesItsWaiterWhetherItEndsBeforeOrAfter() async throws {
        let early = BatchWrite()
        early.complete(.success(()))
        try await early.wait()

        let late = BatchWrite()
        let waiting = Task { try await late.wait() }
        while !late.hasWaiter { await Task.yield() }
        late.complete(.success(()))
        try await waiting.value
        #expect(!late.hasWaiter)

        let failed = BatchWrite()
        let failing = Task { try await failed.wait() }
        failed.complete(.failure(Problem(.internalServerError, .internalError, "cannot write the request body spool file")))
        await #expect(throws: Problem.self) { try await failing.value }
    }

    struct BrokenOff: Error {}

    /// A streamed spool reserves its announced length up front, tells readers how far the
    /// file is written as it goes, and fails them (and throws) when the body breaks off
    /// or does not match its length.
    @Test func aStreamingSpoolFeedsReadersAndFailsThemWhenTheBodyBreaksOff() async throws {
        let directory = NSTemporaryDirectory() + "parley-spool-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = Spool(directory: directory, quotaBytes: 3 << 20)

        let whole = try await StreamingSpool.start(length: 2 << 20, spool: spool)
        #expect(spool.usedBytes == 2 << 20)
        guard case .file(let file, let length) = whole.spooled.body else {
            Issue.record("a streamed spool is a file body")
            return
        }
        #expect(length == 2 << 20)
        let (wakes, wake) = AsyncStream<Void>.makeStream()
        #expect(file.readable(from: 0, wake: { wake.yield() }) == .wait)
        #expect(file.waitingReaders == 1)
        // Too large for what is left of the quota: 413, nothing more held.
        await #expect(throws: Problem.self) { _ = try await StreamingSpool.start(length: 2 << 20, spool: spool) }
        #expect(spool.usedBytes == 2 << 20)

        let (source, feed) = AsyncStream<ByteBuffer>.makeStream()
        async let filled: Void = whole.run(source)
        feed.yield(ByteBuffer(repeating: 1, count: 300 << 10))  // more than one batch
        // The reader parked above is woken once the first batch is written.
        var woken = wakes.makeAsyncIterator()
        _ = await woken.next()
        #expect(file.waitingReaders == 0)
        guard case .upTo(let written) = file.readable(from: 0, wake: {}), written >= 256 << 10 else {
            Issue.record("the first batch is readable before the body is whole: \(file.readable(from: 0, wake: {}))")
            feed.finish()
            _ = try? await filled
            return
        }
        feed.yield(ByteBuffer(repeating: 2, count: (2 << 20) - (300 << 10)))
        feed.finish()
        try await filled
        #expect(file.readable(from: 0, wake: {}) == .toEnd)
        var bytes = [UInt8](repeating: 0, count: 2 << 20)
        #expect(pread(file.descriptor, &bytes, bytes.count, 0) == 2 << 20)
        #expect(bytes[0] == 1 && bytes[(300 << 10) - 1] == 1 && bytes[300 << 10] == 2 && bytes[(2 << 20) - 1] == 2)
        whole.spooled.remove()
        #expect(spool.usedBytes == 0)

        // A body that breaks off: readers see `.failed`, the error reaches the caller.
        let broken = try await StreamingSpool.start(length: 1 << 20, spool: spool)
        guard case .file(let brokenFile, _) = broken.spooled.body else { return }
        let failing = AsyncThrowingStream<ByteBuffer, any Error> { continuation in
            continuation.yield(ByteBuffer(repeating: 3, count: 1000))
            continuation.finish(throwing: BrokenOff())
        }
        await #expect(throws: BrokenOff.self) { try await broken.run(failing) }
        #expect(brokenFile.readable(from: 0, wake: {}) == .failed)
        broken.spooled.remove()

        // Shorter or longer than announced: 400, and the readers fail.
        for sizes in [[1000], [1 << 20, 1]] {
            let wrong = try await StreamingSpool.start(length: 1 << 20, spool: spool)
            guard case .file(let wrongFile, _) = wrong.spooled.body else { return }
            await #expect(throws: Problem.self) { try await wrong.run(Self.chunks(sizes)) }
            #expect(wrongFile.readable(from: 0, wake: {}) == .failed)
            wrong.spooled.remove()
        }
        #expect(spool.usedBytes == 0)
    }

    /// A body without a length (chunked) that outgrows memory is streamed too: what was read
    /// first goes into the file before the rest, the quota grows as bytes arrive, the body
    /// goes upstream as a `stream`, and one past the limit fails with 413.
    @Test func aChunkedBodyIsStreamedWhileItIsSpooled() async throws {
        let directory = NSTemporaryDirectory() + "parley-spool-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = Spool(directory: directory, quotaBytes: 3 << 20)

        let first = [UInt8](repeating: 7, count: 1000)
        let streaming = try await StreamingSpool.start(length: nil, first: first.count, spool: spool)
        #expect(spool.usedBytes == 1000)
        guard case .stream(let file) = streaming.spooled.body else {
            Issue.record("a body without a length is a stream body: \(streaming.spooled.body)")
            return
        }
        #expect(streaming.spooled.body.length == nil)
        #expect(file.readable(from: 0, wake: {}) == .wait)
        let (source, feed) = AsyncStream<ByteBuffer>.makeStream()
        async let filled: Void = streaming.run(source.makeAsyncIterator(), first: first, limit: 2 << 20)
        feed.yield(ByteBuffer(repeating: 8, count: 300 << 10))
        feed.yield(ByteBuffer(repeating: 9, count: 10))
        feed.finish()
        try await filled
        #expect(spool.usedBytes == 1000 + (300 << 10) + 10)
        #expect(file.readable(from: 0, wake: {}) == .toEnd)
        var bytes = [UInt8](repeating: 0, count: 1000 + (300 << 10) + 10 + 1)
        #expect(pread(file.descriptor, &bytes, bytes.count, 0) == 1000 + (300 << 10) + 10)
        #expect(bytes[999] == 7 && bytes[1000] == 8 && bytes[1000 + (300 << 10)] == 9)
        streaming.spooled.remove()
        #expect(spool.usedBytes == 0)

        // Past the limit: 413, the readers fail, the quota is given back.
        let tooLong = try await StreamingSpool.start(length: nil, first: first.count, spool: spool)
        guard case .stream(let longFile) = tooLong.spooled.body else { return }
        await #expect(throws: Problem.self) {
            try await tooLong.run(Self.chunks([1 << 20, 1 << 20]).makeAsyncIterator(), first: first, limit: 1 << 20)
        }
        #expect(longFile.readable(from: 0, wake: {}) == .failed)
        tooLong.spooled.remove()
        #expect(spool.usedBytes == 0)
    }

    @Test func leftoverSpoolFilesAreSweptAtStart() throws {
        let directory = NSTemporaryDirectory() + "parley-spool-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(atPath: directory + "/parley-body-0011", contents: Data([1]))
        _ = FileManager.default.createFile(atPath: directory + "/unrelated", contents: Data([1]))
        #expect(Spool(directory: directory, quotaBytes: 1).sweep() == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["unrelated"])
    }
}
