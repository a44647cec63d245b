import ParleyEncoding
import Conversation
import CurlTransport
import Foundation
import Logging
import ParleyCrypto
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

/// Live tests: libcurl against the simulator on port 0. Serialized so that the 1 GiB
/// tests measure their own memory, not their neighbours'.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct CurlTransportTests {
    // MARK: Round trips

    @Test func getRoundTripSendsHeadersAsGiven() async throws {
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            var headers = HeaderFields()
            headers.append("X-Test", "a b c")
            headers.append("X-Multi", "1")
            headers.append("X-Multi", "2")
            headers.append("X-Empty", "")
            let response = try await transport.send(
                UpstreamRequest(method: "GET", url: "\(base)/echo/some/%2Fpath?q=1&r=%20", headers: headers))
            #expect(response.status == 200)
            #expect(response.headers["Content-Type"] == "application/json")
            #expect(response.headers["server"] == "upstream-simulator")
            let echo = try await Fixtures.decode(Fixtures.Echo.self, response)
            #expect(echo.method == "GET")
            #expect(echo.path == "/echo/some/%2Fpath")
            #expect(echo.query == "q=1&r=%20")
            #expect(echo.headers["x-test"] == ["a b c"])
            #expect(echo.headers["x-multi"] == ["1", "2"])
            #expect(echo.headers["x-empty"] == [""])
            #expect(echo.headers["accept"] == nil, "curl's default Accept must be suppressed")
            #expect(echo.headers["expect"] == nil)
            #expect(echo.bodyBytes == 0)
            #expect(state.requests(route: "ANY /echo") == 1)
        }
    }

    /// A small body of announced length comes with its head: when `send` returns, it is
    /// buffered whole (one hand-back for both). A body without a length streams.
    @Test func aSmallBodyArrivesWithItsHead() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let small = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/small"))
            let length = small.headers["Content-Length"].flatMap(Int.init) ?? -1
            #expect(length > 0)
            #expect(transport.statistics.bufferedBytes == length, "the whole body is there with the head")
            let bytes = try await small.body.collect(upTo: 1 << 20)
            #expect(bytes.count == length)
            #expect(transport.statistics.bufferedBytes == 0)

            let head = try await transport.send(UpstreamRequest(method: "HEAD", url: "\(base)/echo/small"))
            #expect(head.status == 200)
            #expect(try await head.body.collect(upTo: 1 << 20).isEmpty)
        }
    }

    @Test func postRoundTripSendsBodyWithoutExpect() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let body = Array("hello, upstream".utf8)
            let response = try await transport.send(
                UpstreamRequest(
                    method: "POST", url: "\(base)/echo/form",
                    headers: ["Content-Type": "text/plain", "Accept": "application/json", "Content-Length": "999"],
                    body: .bytes(body)))
            #expect(response.status == 200)
            let echo = try await Fixtures.decode(Fixtures.Echo.self, response)
            #expect(echo.method == "POST")
            #expect(echo.bodyBytes == body.count)
            #expect(echo.bodySha256 == Hex.encode(SHA256.hash(body)))
            #expect(echo.headers["content-type"] == ["text/plain"])
            #expect(echo.headers["accept"] == ["application/json"])
            #expect(echo.headers["content-length"] == ["\(body.count)"], "curl derives the length from the body")
            #expect(echo.headers["expect"] == nil)
            #expect(echo.headers["transfer-encoding"] == nil)
        }
    }

    @Test func methodsWithoutBodies() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let delete = try await transport.send(UpstreamRequest(method: "DELETE", url: "\(base)/echo/item/1"))
            let echo = try await Fixtures.decode(Fixtures.Echo.self, delete)
            #expect(echo.method == "DELETE")
            #expect(echo.headers["content-length"] == nil)

            let emptyPost = try await transport.send(UpstreamRequest(method: "POST", url: "\(base)/echo/empty"))
            let posted = try await Fixtures.decode(Fixtures.Echo.self, emptyPost)
            #expect(posted.method == "POST")
            #expect(posted.headers["content-length"] == ["0"])

            let head = try await transport.send(UpstreamRequest(method: "HEAD", url: "\(base)/echo/head"))
            #expect(head.status == 200)
            #expect(try await head.body.collect(upTo: 1024).isEmpty)
        }
    }

    @Test func statusesAndBasicChallenge() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let challenge = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/api/data"))
            #expect(challenge.status == 401)
            #expect(challenge.headers["WWW-Authenticate"] == "Basic realm=\"smp\"")
            challenge.body.discard()

            let wrong = try await transport.send(
                UpstreamRequest(
                    method: "GET", url: "\(base)/api/data",
                    headers: ["Authorization": "Basic " + Base64.encode(Array("alice:nope".utf8))]))
            #expect(wrong.status == 401)
            wrong.body.discard()

            let ok = try await transport.send(
                UpstreamRequest(
                    method: "GET", url: "\(base)/api/data",
                    headers: ["Authorization": "Basic " + Base64.encode(Array("alice:wonderland".utf8))]))
            #expect(ok.status == 200)
            let json = String(decoding: try await ok.body.collect(upTo: 4096), as: UTF8.self)
            #expect(json == #"{"message":"hello","user":"alice"}"#)

            for code in [204, 404, 503] {
                let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/status/\(code)"))
                #expect(response.status == code)
                _ = try await response.body.collect(upTo: 4096)
            }
        }
    }

    @Test func invalidRequestsAreRefusedBeforeSending() async throws {
        let transport = Fixtures.transport()
        defer { transport.shutdown() }
        await Fixtures.expectTransportError(.invalidRequest) {
            _ = try await transport.send(UpstreamRequest(method: "GET", url: "ftp://127.0.0.1/file"))
        }
        await Fixtures.expectTransportError(.invalidRequest) {
            _ = try await transport.send(UpstreamRequest(method: "GET", url: "not a url"))
        }
        await Fixtures.expectTransportError(.invalidRequest) {
            _ = try await transport.send(UpstreamRequest(method: "GET X", url: "http://127.0.0.1/"))
        }
        await Fixtures.expectTransportError(.invalidRequest) {
            _ = try await transport.send(
                UpstreamRequest(method: "PUT", url: "http://127.0.0.1:9/", body: .file(path: "/nonexistent/spool", length: 10)))
        }
        #expect(transport.statistics.transfersStarted == 0)
    }

    // MARK: Streaming and memory

    @Test func downloadsOneGiBWithBoundedBuffering() async throws {
        let configuration = CurlTransport.Configuration()
        let size = 1 << 30
        let expected = Fixtures.patternDigest(bytes: size)
        try await Fixtures.withSimulatorAndTransport(configuration) { base, _, transport in
            let rssBefore = Fixtures.residentBytes()
            let clock = ContinuousClock()
            let start = clock.now
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/files/big?mb=1024"))
            #expect(response.status == 200)
            #expect(response.headers["Content-Length"] == "\(size)")
            let hasher = SHA256Hasher()
            var received = 0
            for try await chunk in response.body {
                chunk.withUnsafeBytes { hasher.update($0) }
                received += chunk.count
            }
            let elapsed = clock.now - start
            let rssAfter = Fixtures.residentBytes()
            let stats = transport.statistics
            report(
                "1 GiB download: \(elapsed), RSS growth \((rssAfter - rssBefore) >> 10) KiB, "
                    + "maxBufferedBytes \(stats.maxBufferedBytes) (high-water \(configuration.highWaterMark))")
            #expect(received == size)
            #expect(Hex.encode(hasher.finalize()) == expected)
            // One write callback delivers at most CURL_MAX_WRITE_SIZE (16 KiB) past the mark.
            #expect(stats.maxBufferedBytes <= configuration.highWaterMark + 16 * 1024)
            #expect(stats.bufferedBytes == 0)
            #expect(rssAfter - rssBefore < 64 << 20)
        }
    }

    @Test func tinyBufferPausesAndResumesWithoutLosingBytes() async throws {
        let configuration = CurlTransport.Configuration(highWaterMark: 20_000, lowWaterMark: 5_000)
        try await Fixtures.withSimulatorAndTransport(configuration) { base, _, transport in
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/files/big?mb=16"))
            let hasher = SHA256Hasher()
            var received = 0
            var iterator = response.body.makeAsyncIterator()
            while let chunk = try await iterator.next() {
                chunk.withUnsafeBytes { hasher.update($0) }
                received += chunk.count
                if received % 7 == 0 { await Task.yield() }
            }
            #expect(received == 16 << 20)
            #expect(Hex.encode(hasher.finalize()) == Fixtures.patternDigest(bytes: 16 << 20))
            #expect(transport.statistics.maxBufferedBytes <= 20_000 + 16 * 1024)
        }
    }

    @Test func uploadsOneGiBFromAFile() async throws {
        let size = 1 << 30
        let directory = NSTemporaryDirectory() + "parley-upload-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/body.bin"

        // Write the file in 1 MiB blocks, hashing as we go; each block is stamped with its index.
        let expected: String = try {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            let hasher = SHA256Hasher()
            var block = SecureRandom.bytes(1 << 20)
            for index in 0..<(size >> 20) {
                withUnsafeBytes(of: UInt64(index).bigEndian) { stamp in
                    block.withUnsafeMutableBytes { $0.copyMemory(from: stamp) }
                }
                block.withUnsafeBytes { hasher.update($0) }
                try handle.write(contentsOf: block)
            }
            return Hex.encode(hasher.finalize())
        }()

        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            let rssBefore = Fixtures.residentBytes()
            let clock = ContinuousClock()
            let start = clock.now
            let response = try await transport.send(
                UpstreamRequest(
                    method: "PUT", url: "\(base)/upload", headers: ["Content-Type": "application/octet-stream"],
                    body: .file(path: path, length: Int64(size))))
            #expect(response.status == 200)
            let answer = try await Fixtures.decode(Fixtures.Upload.self, response)
            let elapsed = clock.now - start
            let rssAfter = Fixtures.residentBytes()
            report("1 GiB upload: \(elapsed), RSS growth \((rssAfter - rssBefore) >> 10) KiB")
            #expect(answer.bytes == size)
            #expect(answer.sha256 == expected)
            #expect(state.requests(route: "PUT /upload") == 1)
            #expect(rssAfter - rssBefore < 64 << 20)
        }
    }

    /// A body file given a closer hands its descriptor to it, once, when the last reference
    /// goes (a spool file's close runs on the blocking pool).
    @Test func aBodyFileHandsItsDescriptorToItsCloserOnce() throws {
        let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        let handed = Mutex<[Int32]>([])
        var file: BodyFile? = BodyFile(adopting: fd, filling: true) { descriptor in
            handed.withLock { $0.append(descriptor) }
            _ = close(descriptor)
        }
        #expect(file?.descriptor == fd)
        #expect(handed.withLock { $0 }.isEmpty)
        file = nil
        #expect(handed.withLock { $0 } == [fd])
    }

    /// A body file its writer is still filling: the transfer sends what is written, waits
    /// for the rest, and aborts when the writer gives up. Of announced length or not (a
    /// `stream`, sent chunked, whose end is the writer's `finish`).
    @Test(arguments: [true, false], [false, true])
    func aBodyFileStillBeingWrittenIsSentAsItGrows(completes: Bool, chunked: Bool) async throws {
        let path = NSTemporaryDirectory() + "parley-growing-\(UUID().uuidString)"
        let fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        unlink(path)
        let file = BodyFile(adopting: fd, filling: true)
        let parts = (0..<3).map { part in (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ part) } }
        func append(_ part: [UInt8]) {
            let written = part.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            #expect(written == part.count)
            file.didWrite(Int64(part.count))
        }
        /// Until the transfer has sent everything written so far and waits for more.
        func untilTheTransferWaits() async throws {
            let deadline = ContinuousClock.now + .seconds(20)
            while file.waitingReaders == 0 {
                try #require(ContinuousClock.now < deadline, "the transfer never waited for the file")
                try await Task.sleep(for: .milliseconds(2))
            }
        }

        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            async let sent = transport.send(
                UpstreamRequest(method: "PUT", url: "\(base)/upload", body: chunked ? .stream(file) : .file(file, length: Int64(3 << 20))))
            append(parts[0])
            try await untilTheTransferWaits()
            append(parts[1])
            try await untilTheTransferWaits()
            if completes {
                append(parts[2])
                file.finish()
                let answer = try await Fixtures.decode(Fixtures.Upload.self, try await sent)
                #expect(answer.bytes == 3 << 20)
                #expect(answer.sha256 == Hex.encode(SHA256.hash(parts.flatMap { $0 })))
            } else {
                file.fail()
                let outcome: Result<UpstreamResponse, any Error>
                do { outcome = .success(try await sent) } catch { outcome = .failure(error) }
                guard case .failure(let error) = outcome else {
                    Issue.record("a body its writer gave up on was answered")
                    return
                }
                #expect(error is TransportError, "\(error)")
            }
            #expect(state.requests(route: "PUT /upload") == 1)
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    /// A body that passes through once: the transfer sends what the writer hands over, the
    /// writer waits while the pipe is full, a writer that gives up aborts the transfer, and
    /// the pipe is closed when the transfer is over. It goes on a connection of its own
    /// (a pipe cannot rewind for curl's resend on a reused connection that turned out closed).
    @Test(arguments: [true, false], [false, true])
    func aPipeBodyIsSentAsItArrivesOnAConnectionOfItsOwn(completes: Bool, chunked: Bool) async throws {
        let pipe = BodyPipe(capacity: 256 << 10)
        let parts = (0..<3).map { part in (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ part) } }
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            // An idle connection to the same upstream, which a pipe body must not reuse.
            _ = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/warm")).body.collect(upTo: 1 << 20)
            #expect(transport.statistics.connectionsOpened == 1)
            let sent = Task {
                try await transport.send(
                    UpstreamRequest(method: "PUT", url: "\(base)/upload", body: .pipe(pipe, length: chunked ? nil : Int64(3 << 20))))
            }
            // Each 1 MiB part is four times the pipe: the writer goes on only as curl sends.
            #expect(await pipe.write(parts[0]))
            #expect(await pipe.write(parts[1]))
            if completes {
                #expect(await pipe.write(parts[2]))
                pipe.finish()
                let answer = try await Fixtures.decode(Fixtures.Upload.self, try await sent.value)
                #expect(answer.bytes == 3 << 20)
                #expect(answer.sha256 == Hex.encode(SHA256.hash(parts.flatMap { $0 })))
                #expect(pipe.taken == 3 << 20)
            } else {
                pipe.fail()
                let outcome = await sent.result
                guard case .failure(let error) = outcome else {
                    Issue.record("a body its writer gave up on was answered")
                    return
                }
                #expect(error is TransportError, "\(error)")
            }
            // An aborted upload may end before the upstream's router saw its head.
            if completes {
                #expect(state.requests(route: "PUT /upload") == 1)
            } else {
                #expect(state.requests(route: "PUT /upload") <= 1)
            }
            #expect(transport.statistics.connectionsOpened == 2)
            #expect(transport.statistics.transfersActive == 0)
            #expect(await pipe.write([1]) == false, "the transfer is over: the pipe is closed")
        }
    }

    /// An upstream that answers 413 at once, its body unread: curl stops sending, the answer
    /// comes back, and the pipe's writer is not left waiting (the transfer closes it).
    @Test func aPipeBodyRefusedEarlyFreesItsWriter() async throws {
        let pipe = BodyPipe(capacity: 256 << 10)
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            let writer = Task {
                var taken = 0
                for _ in 0..<64 {
                    guard await pipe.write([UInt8](repeating: 5, count: 256 << 10)) else { break }
                    taken += 1
                }
                return taken
            }
            let response = try await transport.send(
                UpstreamRequest(method: "PUT", url: "\(base)/upload/limited", body: .pipe(pipe, length: 16 << 20)))
            #expect(response.status == 413)
            _ = try await response.body.collect(upTo: 1 << 20)
            #expect(await writer.value < 64, "the writer stopped being waited for before the 16 MiB were sent")
            #expect(state.requests(route: "PUT /upload/limited") == 1)
        }
    }

    // MARK: Concurrency and reuse

    @Test func twoHundredConcurrentRequests() async throws {
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            let results = try await withThrowingTaskGroup(of: (Int, Int, String).self) { group in
                for i in 0..<200 {
                    group.addTask {
                        let response = try await transport.send(
                            UpstreamRequest(method: "GET", url: "\(base)/echo/n/\(i)", headers: ["X-Index": "\(i)"]))
                        let echo = try await Fixtures.decode(Fixtures.Echo.self, response)
                        return (i, response.status, echo.headers["x-index"]?.first ?? "")
                    }
                }
                var all: [(Int, Int, String)] = []
                for try await result in group { all.append(result) }
                return all
            }
            #expect(results.count == 200)
            #expect(results.allSatisfy { $0.1 == 200 && $0.2 == "\($0.0)" })
            #expect(state.requests(route: "ANY /echo") == 200)
            let stats = transport.statistics
            #expect(stats.transfersStarted == 200)
            #expect(stats.transfersActive == 0)
            #expect(stats.connectionsOpened <= CurlTransport.Configuration().maxConnectionsPerHost)
        }
    }

    /// A command only wakes the transfer thread when it sleeps, so none may be left waiting for
    /// the poll's timeout: with that timeout at an hour, bursts of overlapping requests (which
    /// arrive while the thread is busy) and requests one after the other (which find it asleep)
    /// all complete, and well before the deadline below, which only a lost wake-up would reach.
    @Test func everyCommandWakesTheThreadThatSleeps() async throws {
        var configuration = CurlTransport.Configuration()
        configuration.idlePollInterval = .seconds(3600)
        try await Fixtures.withSimulatorAndTransport(configuration) { base, state, transport in
            let finished = try await withThrowingTaskGroup(of: Int?.self) { outer in
                outer.addTask {
                    var done = 0
                    for round in 0..<5 {
                        done += try await withThrowingTaskGroup(of: Int.self) { group in
                            for i in 0..<40 {
                                group.addTask {
                                    let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/burst/\(round)/\(i)"))
                                    _ = try await response.body.collect(upTo: 1 << 16)
                                    return response.status == 200 ? 1 : 0
                                }
                            }
                            return try await group.reduce(0, +)
                        }
                        for i in 0..<10 {
                            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/one/\(round)/\(i)"))
                            _ = try await response.body.collect(upTo: 1 << 16)
                            if response.status == 200 { done += 1 }
                        }
                    }
                    return done
                }
                outer.addTask {
                    try await Task.sleep(for: .seconds(60))
                    return nil
                }
                let first = try await outer.next() ?? nil
                outer.cancelAll()
                return first
            }
            #expect(finished == 250, "a request waited for the poll's timeout (finished: \(String(describing: finished)))")
            #expect(state.requests(route: "ANY /echo") == 250)
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    @Test func anIdlePollIntervalOutsideItsRangeIsAProblem() {
        var configuration = CurlTransport.Configuration()
        configuration.idlePollInterval = .zero
        #expect(configuration.problems == ["idlePollInterval must be between 1 ms and 1 hour"])
        configuration.idlePollInterval = .seconds(3601)
        #expect(configuration.problems == ["idlePollInterval must be between 1 ms and 1 hour"])
    }

    /// `PARLEY_UPSTREAM_CONNECTIONS_PER_HOST` reaches libcurl: twelve exchanges that overlap open
    /// twelve connections by default and at most three under a limit of three, all answered.
    @Test(arguments: [nil, 3])
    func connectionsPerHostAreCappedByConfiguration(limit: Int?) async throws {
        var configuration = CurlTransport.Configuration()
        if let limit { configuration.maxConnectionsPerHost = limit }
        try await Fixtures.withSimulatorAndTransport(configuration) { base, _, transport in
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<12 {
                    group.addTask {
                        let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/slow?ms=300"))
                        _ = try await response.body.collect(upTo: 1 << 16)
                        return response.status
                    }
                }
                var all: [Int] = []
                for try await status in group { all.append(status) }
                return all
            }
            #expect(statuses == Array(repeating: 200, count: 12))
            let opened = transport.statistics.connectionsOpened
            if let limit {
                #expect((1...limit).contains(opened), "opened \(opened) connections under a limit of \(limit)")
            } else {
                #expect(opened > 3, "opened \(opened) connections without a limit")
            }
        }
    }

    @Test func sequentialRequestsReuseOneConnection() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            for i in 0..<20 {
                let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/seq/\(i)"))
                #expect(response.status == 200)
                _ = try await response.body.collect(upTo: 1 << 16)
            }
            let stats = transport.statistics
            #expect(stats.transfersStarted == 20)
            #expect(stats.connectionsOpened == 1)
        }
    }

    // MARK: Time limits and failures

    @Test func totalTimeoutEndsASlowAnswer() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let clock = ContinuousClock()
            let start = clock.now
            await Fixtures.expectTransportError(.timeout) {
                _ = try await transport.send(
                    UpstreamRequest(
                        method: "GET", url: "\(base)/slow?ms=10000", timeouts: Timeouts(total: .milliseconds(300))))
            }
            #expect(clock.now - start < .seconds(5))
        }
    }

    @Test func idleTimeoutEndsAStalledBody() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let response = try await transport.send(
                UpstreamRequest(method: "GET", url: "\(base)/stall", timeouts: Timeouts(idle: .seconds(1))))
            #expect(response.status == 200)
            var iterator = response.body.makeAsyncIterator()
            let first = try await iterator.next()
            #expect(first == Array("stalling".utf8))
            await Fixtures.expectTransportError(.timeout) {
                _ = try await iterator.next()
            }
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    @Test func closedPortIsUnavailable() async throws {
        let transport = Fixtures.transport()
        defer { transport.shutdown() }
        let port = try FreePort.find()
        await Fixtures.expectTransportError(.unavailable) {
            _ = try await transport.send(UpstreamRequest(method: "GET", url: "http://127.0.0.1:\(port)/"))
        }
    }

    /// Whether a failed request may have reached the peer: never when nothing could connect
    /// (such a request may be sent again safely), always once the request was written, whatever
    /// the peer did with it (a rotating refresh token must then be taken as spent).
    @Test func aFailureSaysWhetherTheRequestMayHaveReachedThePeer() async throws {
        let transport = Fixtures.transport()
        defer { transport.shutdown() }
        let port = try FreePort.find()
        do {
            _ = try await transport.send(UpstreamRequest(method: "POST", url: "http://127.0.0.1:\(port)/", body: .bytes(Array("x=1".utf8))))
            Issue.record("a closed port answered")
        } catch let error as TransportError {
            #expect(error.code == .unavailable && !error.mayHaveReachedPeer, "\(error)")
        }
        let upstream = try HostileUpstream(cases: ["read-then-close": .raw("")])
        defer { upstream.stop() }
        do {
            _ = try await transport.send(UpstreamRequest(method: "POST", url: upstream.url("read-then-close"), body: .bytes(Array("x=1".utf8))))
            Issue.record("a peer that closed without answering answered")
        } catch let error as TransportError {
            #expect(error.mayHaveReachedPeer, "\(error)")
        }
        #expect(upstream.requests("read-then-close").count == 1, "the request did reach the peer")
    }

    // MARK: Cancellation and shutdown

    @Test func cancellingTheReaderEndsTheTransfer() async throws {
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/stall"))
            let body = response.body
            let reader = Task {
                var iterator = body.makeAsyncIterator()
                _ = try await iterator.next()  // "stalling"
                return try await iterator.next()  // parks until cancelled
            }
            // The transfer is attached until the reader is cancelled.
            #expect(transport.statistics.transfersActive == 1)
            reader.cancel()
            await Fixtures.expectTransportError(.cancelled) {
                _ = try await reader.value
            }
            #expect(transport.statistics.transfersActive == 0)
            #expect(state.requests(route: "GET /stall") == 1)
        }
    }

    /// A small answer whose body stops short: its head is held for the body. Cancelling the
    /// caller then ends the transfer (and the multi thread goes on serving others); an idle
    /// timeout hands the head over with what arrived, and the body fails.
    @Test func aHeldHeadWhoseBodyStopsShort() async throws {
        let upstream = try HostileUpstream(cases: [
            "short": .raw("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", ending: .stall)
        ])
        defer { upstream.stop() }
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let waiting = Task { try await transport.send(UpstreamRequest(method: "GET", url: upstream.url("short"))) }
            let deadline = ContinuousClock.now + .seconds(20)
            while transport.statistics.bufferedBytes < 3 {
                try #require(ContinuousClock.now < deadline, "the short body never arrived")
                try await Task.sleep(for: .milliseconds(5))
            }
            waiting.cancel()
            await Fixtures.expectTransportError(.cancelled) { _ = try await waiting.value }
            #expect(transport.statistics.transfersActive == 0)
            let after = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/echo/after"))
            #expect(after.status == 200)
            _ = try await after.body.collect(upTo: 1 << 20)

            let timed = try await transport.send(
                UpstreamRequest(method: "GET", url: upstream.url("short"), timeouts: Timeouts(idle: .seconds(1))))
            #expect(timed.status == 200)
            var iterator = timed.body.makeAsyncIterator()
            #expect(try await iterator.next() == Array("abc".utf8))
            await Fixtures.expectTransportError(.timeout) { _ = try await iterator.next() }
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    @Test func cancellingSendWhileWaitingForTheHead() async throws {
        try await Fixtures.withSimulatorAndTransport { base, state, transport in
            let clock = ContinuousClock()
            let start = clock.now
            let task = Task {
                try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/slow?ms=10000"))
            }
            // Cancel once the request is with the upstream, so the transfer is attached.
            await state.waitForRequests(route: "GET /slow")
            #expect(transport.statistics.transfersActive == 1)
            task.cancel()
            await Fixtures.expectTransportError(.cancelled) {
                _ = try await task.value
            }
            #expect(clock.now - start < .seconds(5))
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    @Test func discardingTheBodyEndsTheTransfer() async throws {
        try await Fixtures.withSimulatorAndTransport { base, _, transport in
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/files/big?mb=64"))
            let clock = ContinuousClock()
            let start = clock.now
            response.body.discard()
            await Fixtures.expectTransportError(.cancelled) {
                _ = try await response.body.collect(upTo: 1 << 30)
            }
            report("discard settled in \(clock.now - start)")
            #expect(transport.statistics.bufferedBytes == 0)
            #expect(transport.statistics.transfersActive == 0)
        }
    }

    @Test func shutdownFailsTransfersInFlight() async throws {
        try await withRunningSimulator(logger: Fixtures.simulatorLogger) { port, _ in
            let transport = Fixtures.transport()
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "http://127.0.0.1:\(port)/stall"))
            var iterator = response.body.makeAsyncIterator()
            _ = try await iterator.next()
            transport.shutdown()
            await Fixtures.expectTransportError(.cancelled) {
                _ = try await iterator.next()
            }
            #expect(transport.statistics.transfersActive == 0)
            transport.shutdown()  // idempotent
            await Fixtures.expectTransportError(.cancelled) {
                _ = try await transport.send(UpstreamRequest(method: "GET", url: "http://127.0.0.1:\(port)/echo/x"))
            }
        }
    }

    /// Callers wake the curl thread after giving the queue's lock back; a shutdown meanwhile
    /// must neither free the multi handle under a wake-up nor leave a caller waiting. Sixteen
    /// callers send one request after another (the loop sleeps whenever it runs dry and is woken)
    /// until the shutdown, which comes once 64 have been answered: every later one fails
    /// `.cancelled`, nothing else, and no caller is left waiting.
    @Test func requestsRacingAShutdownAnswerOrAreCancelled() async throws {
        try await withRunningSimulator(logger: Fixtures.simulatorLogger) { port, _ in
            for _ in 0..<10 {
                let transport = Fixtures.transport()
                let answered = AnswerCount()
                let (enough, signal) = AsyncStream<Void>.makeStream()
                let failures = await withTaskGroup(of: [String].self, returning: [String].self) { group in
                    for index in 0..<16 {
                        group.addTask {
                            while true {
                                do {
                                    let response = try await transport.send(
                                        UpstreamRequest(method: "GET", url: "http://127.0.0.1:\(port)/echo/\(index)"))
                                    _ = try await response.body.collect(upTo: 1 << 16)
                                    guard response.status == 200 else {
                                        signal.yield()  // the others end at the shutdown, not never
                                        return ["status \(response.status)"]
                                    }
                                    if answered.value.add(1, ordering: .relaxed).newValue == 64 { signal.yield() }
                                } catch let error as TransportError where error.code == .cancelled {
                                    return []
                                } catch {
                                    signal.yield()
                                    return ["\(error)"]
                                }
                            }
                        }
                    }
                    group.addTask {
                        for await _ in enough { break }
                        transport.shutdown()
                        return []
                    }
                    return await group.reduce(into: []) { $0 += $1 }
                }
                signal.finish()
                #expect(failures.isEmpty, "\(failures)")
                #expect(answered.value.load(ordering: .relaxed) >= 64)
                #expect(transport.statistics.transfersActive == 0)
            }
        }
    }

    final class AnswerCount: Sendable { let value = Atomic<Int>(0) }

    // MARK: Logs

    @Test func logsNameTheHostButNoSecrets() async throws {
        let store = MemoryLogHandler.Store()
        var logger = Logger(label: "curl-transport-log-test") { _ in MemoryLogHandler(store: store) }
        logger.logLevel = .trace
        let secret = "s3cr3t-" + SecureRandom.token(byteCount: 8)
        try await Fixtures.withSimulatorAndTransport(logger: logger) { base, _, transport in
            let response = try await transport.send(
                UpstreamRequest(
                    method: "POST", url: "\(base)/echo/q?token=\(secret)", headers: ["Authorization": "Bearer \(secret)"],
                    body: .bytes(Array(secret.utf8))))
            _ = try await response.body.collect(upTo: 1 << 16)
        }
        let lines = store.all
        #expect(lines.contains { $0.contains("upstream.host=127.0.0.1") && $0.contains("http.status=200") })
        #expect(!lines.contains { $0.contains(secret) }, "\(lines)")
    }
}

/// TLS through nginx with `ssl_verify_client on`.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct CurlTransportTLSTests {
    @Test func clientCertificateAndCA() async throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        try await withRunningSimulator(logger: Fixtures.simulatorLogger) { port, state in
            let frontend = try await TLSFrontend.start(certificates: certificates, upstreamPort: port)
            defer { frontend.remove() }
            let transport = Fixtures.transport()
            defer { transport.shutdown() }
            let url = "\(frontend.baseURL)/echo/tls"
            let full = TLSOptions(
                clientPKCS12: certificates.clientPKCS12, clientPKCS12Password: certificates.clientPKCS12Password,
                caPEM: certificates.caPEM)

            let response = try await transport.send(UpstreamRequest(method: "GET", url: url, tls: full))
            #expect(response.status == 200)
            let echo = try await Fixtures.decode(Fixtures.Echo.self, response)
            #expect(echo.headers["x-client-verify"] == ["SUCCESS"])
            #expect(echo.headers["x-client-subject"]?.first?.contains(certificates.clientCommonName) == true)
            #expect(state.requests(route: "ANY /echo") == 1)

            // No client certificate: the frontend refuses to answer.
            await Fixtures.expectTransportError(.unavailable) {
                _ = try await transport.send(
                    UpstreamRequest(method: "GET", url: url, tls: TLSOptions(caPEM: certificates.caPEM)))
            }
            // Client certificate but no trust in the test CA: the server is not verified.
            await Fixtures.expectTransportError(.unavailable) {
                _ = try await transport.send(
                    UpstreamRequest(
                        method: "GET", url: url,
                        tls: TLSOptions(
                            clientPKCS12: certificates.clientPKCS12,
                            clientPKCS12Password: certificates.clientPKCS12Password)))
            }
            // A wrong PKCS#12 password makes the request inexpressible. A fresh transport:
            // curl would reuse the cached connection made with the same certificate bytes,
            // since the key password is not part of its connection-reuse match.
            let fresh = Fixtures.transport()
            defer { fresh.shutdown() }
            await Fixtures.expectTransportError(.invalidRequest) {
                _ = try await fresh.send(
                    UpstreamRequest(
                        method: "GET", url: url,
                        tls: TLSOptions(
                            clientPKCS12: certificates.clientPKCS12, clientPKCS12Password: "wrong",
                            caPEM: certificates.caPEM)))
            }
            #expect(state.requests(route: "ANY /echo") == 1)
        }
    }
}
