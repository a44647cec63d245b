import Foundation
import NIOCore
import Testing

@testable import ParleyServer

/// The per-registration in-flight cap and the spool's disk quota, as objects.
@Suite struct ResourceLimitTests {
    @Test func inFlightTicketsAreCappedAndGivenBackOnce() throws {
        let limits = InFlightLimits(perRegistration: 2)
        let registration = UUID()
        let first = try limits.admit(registration)
        var second: InFlightTicket? = try limits.admit(registration)
        #expect(throws: Problem.self) { try limits.admit(registration) }
        #expect(limits.count(UUID()) == 0)
        first.release()
        first.release()  // once only
        #expect(limits.count(registration) == 1)
        _ = second
        second = nil  // a dropped response gives its slot back
        #expect(limits.count(registration) == 0)
        _ = try limits.admit(registration)
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

        let body = try await SpooledBody.read(Self.chunks([1 << 20, 1 << 20]), limit: 1 << 30, memoryLimit: 1024, spool: spool)
        #expect(body.body.length == 2 << 20)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
        #expect(spool.usedBytes == 2 << 20)

        // A second body would pass the quota: 413 with Retry-After, and nothing is held.
        await #expect(throws: Problem.self) {
            _ = try await SpooledBody.read(Self.chunks([1 << 20, 1 << 20]), limit: 1 << 30, memoryLimit: 1024, spool: spool)
        }
        #expect(spool.usedBytes == 2 << 20)
        body.remove()
        #expect(spool.usedBytes == 0)
        // Small bodies stay in memory and take no quota.
        let small = try await SpooledBody.read(Self.chunks([100]), limit: 1 << 30, memoryLimit: 1024, spool: spool)
        #expect(small.body == .bytes([UInt8](repeating: 7, count: 100)))
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
