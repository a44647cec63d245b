import ParleyEncoding
import AuthFlows
import Foundation
import ParleyCrypto
import ParleyDomain
import ParleyServer
import ParleyTesting
import Testing

@Suite(.serialized) struct RegistrationAndProxyTests {
    @Test func registrationShapeAndTokenShownOnce() async throws {
        try await withLiveParley { live in
            let created = try await live.json("POST", "/v1/registrations", ["destination": "sim", "deviceType": "iOS", "userHint": "alice"])
            #expect(created.status == 201)
            let json = try #require(created.json)
            for key in ["id", "clientToken", "destination", "appcid", "status", "flow", "deviceType", "deviceModel", "userHint", "createdAt"] {
                #expect(json.keys.contains(key), "missing \(key)")
            }
            #expect(json["status"] as? String == "active")
            #expect(json["appcid"] is NSNull)
            let token = try #require(json["clientToken"] as? String)
            let me = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(me.status == 200)
            #expect(me.json?["clientToken"] == nil)
            #expect(me.json?["id"] as? String == json["id"] as? String)
            #expect(me.header("Cache-Control") == "no-store")
            // Only the hash of the client token is stored.
            let rows = try await live.store.query("SELECT client_token_hash FROM registrations")
            #expect(try rows[0].bytes("client_token_hash") == SecretToken.hash(token))
        }
    }

    @Test func proxiesWithBasicAndKeepsAtSignsInSegments() async throws {
        try await withLiveParley { live in
            let (_, token) = try await live.register()
            let data = try await live.request("GET", "/v1/proxy/api/data", token: token)
            #expect(data.status == 200)
            #expect(data.json?["user"] as? String == "alice")
            let echo = try await live.request("GET", "/v1/proxy/echo/user@example.com/x%20y?q=1&r=a%2Fb", token: token)
            #expect(echo.status == 200)
            #expect(echo.json?["path"] as? String == "/echo/user@example.com/x%20y")
            #expect(echo.json?["query"] as? String == "q=1&r=a%2Fb")
        }
    }

    @Test func failedBasicCredentialsReturnTheUpstream401AsItIs() async throws {
        try await withLiveParley { live in
            let created = try await live.json(
                "POST", "/v1/registrations", ["destination": "sim", "credentials": ["username": "alice", "password": "wrong"]])
            let token = try #require(created.json?["clientToken"] as? String)
            let data = try await live.request("GET", "/v1/proxy/api/data", token: token)
            #expect(data.status == 401)
            #expect(data.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
            #expect(data.header("Content-Type") != "application/problem+json")
        }
    }

    @Test func headersAreFilteredBothWays() async throws {
        try await withLiveParley { live in
            let (_, token) = try await live.register()
            let echo = try await live.request(
                "GET", "/v1/proxy/echo/h", token: token,
                headers: [
                    ("Cookie", "client=1"), ("X-Forwarded-For", "10.0.0.1"), ("Forwarded", "for=10.0.0.1"), ("Connection", "close, X-Drop"),
                    ("X-Drop", "1"), ("Proxy-Authorization", "Basic eA=="), ("TE", "trailers"), ("X-Keep", "kept"),
                ])
            #expect(echo.status == 200)
            let headers = try #require(echo.json?["headers"] as? [String: Any])
            for dropped in ["cookie", "x-forwarded-for", "forwarded", "x-drop", "proxy-authorization", "te"] {
                #expect(headers[dropped] == nil, "\(dropped) reached the upstream")
            }
            // The client's bearer token never reaches the upstream.
            #expect((headers["authorization"] as? [String])?.contains { $0.contains(token) } != true)
            #expect(headers["x-keep"] as? [String] == ["kept"])
        }
    }

    @Test func badInputIsRefusedAndChangesNothing() async throws {
        try await withLiveParley(
            destinations: { [DestinationSpec(name: "sim", url: $0, basic: .init(), maxRequestBodyBytes: 1024)] },
            adjust: { $0.limits.maxJSONBytes = 512 }
        ) { live in
            let (_, token) = try await live.register()
            let before = try await live.stateCounts()
            let auditBefore = try await live.store.query("SELECT count(*) AS n FROM audit_events")[0].int("n")

            func expectProblem(_ response: RawHTTPResponse, _ status: Int, _ code: String, _ label: String) {
                #expect(response.status == status, "\(label): status \(response.status) \(response.text)")
                #expect(response.header("Content-Type") == "application/problem+json", "\(label)")
                #expect(response.json?["code"] as? String == code, "\(label): \(response.text)")
                #expect(!response.text.contains(token), "\(label) leaked the token")
            }

            expectProblem(try await live.json("POST", "/v1/registrations", ["destination": "nowhere"]), 400, "invalid_request", "unknown destination")
            expectProblem(
                try await live.request("POST", "/v1/registrations", headers: [("Content-Type", "application/json")], body: Array("{\"destination\":".utf8)),
                400, "invalid_request", "malformed JSON")
            expectProblem(try await live.json("POST", "/v1/registrations", ["destination": 42]), 400, "invalid_request", "schema error")
            expectProblem(
                try await live.json("POST", "/v1/registrations", ["destination": "sim", "returnUrl": "https://evil.example/"]), 400,
                "invalid_request", "returnUrl not allowed")
            expectProblem(
                try await live.json("POST", "/v1/registrations", ["destination": "sim", "userHint": String(repeating: "x", count: 600)]), 413,
                "payload_too_large", "JSON over the limit")

            let missing = try await live.request("GET", "/v1/registrations/me")
            expectProblem(missing, 401, "invalid_client_token", "missing token")
            #expect(missing.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
            expectProblem(try await live.request("GET", "/v1/proxy/api/data", token: "pct_wrong"), 401, "invalid_client_token", "wrong token")

            for escape in [
                "/v1/proxy/../registrations/me", "/v1/proxy/a/%2e%2e/b", "/v1/proxy/a/%2E%2e/%2e%2e/x", "/v1/proxy/a%2fb", "/v1/proxy/a%2Fb",
                "/v1/proxy/a%5cb", "/v1/proxy/a//b", "/v1/proxy/http://evil.example/x", "/v1/proxy/a\\b", "/v1/proxy/a/%0d%0aX:1",
                "/v1/proxy/a/./b", "/v1/proxy/%zz",
            ] {
                let response = try await live.request("GET", escape, token: token)
                expectProblem(response, 400, "invalid_request", escape)
            }
            expectProblem(
                try await live.request("POST", "/v1/proxy/upload", token: token, body: [UInt8](repeating: 1, count: 2048)), 413,
                "payload_too_large", "proxied body over the limit")

            let big = try await live.request("GET", "/v1/proxy/echo/x", token: token, headers: [("X-Big", String(repeating: "a", count: 40 * 1024))])
            expectProblem(big, 431, "headers_too_large", "oversized headers")

            // A bare CR in a header cannot be framed: refused, never forwarded.
            let raw = Array("GET /v1/proxy/echo/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nX-Evil: a\rb\r\nConnection: close\r\n\r\n".utf8)
            if let crResponse = try? await RawHTTP.send(port: live.port, bytes: raw) {
                #expect(crResponse.status == 400)
            }
            #expect(live.simulator.requests(route: "echo") == 0, "no bad request reached the upstream")

            #expect(try await live.stateCounts() == before)
            let auditAfter = try await live.store.query("SELECT count(*) AS n FROM audit_events")[0].int("n")
            #expect(auditAfter == auditBefore)
        }
    }

    @Test func isolationBetweenRegistrations() async throws {
        try await withLiveParley { live in
            let (idA, tokenA) = try await live.register()
            let (idB, tokenB) = try await live.register()
            let meA = try await live.request("GET", "/v1/registrations/me", token: tokenA)
            let meB = try await live.request("GET", "/v1/registrations/me", token: tokenB)
            #expect(meA.json?["id"] as? String == idA)
            #expect(meB.json?["id"] as? String == idB)
            #expect(try await live.request("DELETE", "/v1/registrations/me", token: tokenA).status == 204)
            #expect(try await live.request("GET", "/v1/registrations/me", token: tokenA).status == 401)
            #expect(try await live.request("GET", "/v1/registrations/me", token: tokenB).status == 200)
        }
    }

    @Test func spooledUploadArrivesIntactAndTheSpoolFileIsRemoved() async throws {
        try await withLiveParley { live in
            let (_, token) = try await live.register()
            let body = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }  // 3 MiB > 64 KiB memory limit
            let response = try await live.request("POST", "/v1/proxy/upload", token: token, body: body)
            #expect(response.status == 200)
            #expect(response.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            #expect(response.json?["bytes"] as? Int == body.count)
            #expect(try FileManager.default.contentsOfDirectory(atPath: live.spoolDirectory).isEmpty)
            // /metrics counts what the spool wrote and how long the writes took.
            let metrics = try await live.request("GET", "/metrics").text
            func value(_ name: String) -> Double? {
                metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
            }
            #expect(value("parley_spool_written_bytes") == Double(body.count))
            #expect((value("parley_spool_write_seconds") ?? 0) > 0)
        }
    }

    /// A destination with no filter that could send a request twice (no Basic, CSRF, OAuth2,
    /// SAML2 or OTP): a large body passes through to the upstream as it arrives and is kept
    /// nowhere, with a length or chunked.
    @Test func anUploadThatCannotBeSentTwicePassesThroughUnspooled() async throws {
        try await withLiveParley(destinations: Self.plainAndBasic) { live in
            let (_, token) = try await live.register("plain", credentials: false)
            let body = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 1) }
            let response = try await live.request("POST", "/v1/proxy/upload", token: token, body: body)
            #expect(response.status == 200)
            #expect(response.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            #expect(response.json?["bytes"] as? Int == body.count)
            let metrics = try await live.request("GET", "/metrics").text
            #expect(metrics.split(separator: "\n").contains("parley_spool_written_bytes 0.0"), "nothing was spooled")
            #expect(metrics.split(separator: "\n").contains("parley_spool_bytes 0.0"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: live.spoolDirectory).isEmpty)
        }
    }

    /// An upstream that refuses a large body at once (`413`, its body unread): the client
    /// gets that answer, whether the body was passing through or spooled, and the instance
    /// serves the next upload.
    @Test(arguments: ["plain", "sim"])
    func anUploadTheUpstreamRefusesAtOnceGetsItsAnswer(destination: String) async throws {
        try await withLiveParley(destinations: Self.plainAndBasic) { live in
            let (_, token) = try await live.register(destination, credentials: destination == "sim")
            let body = [UInt8](repeating: 3, count: 8 << 20)
            let refused = try await live.request("PUT", "/v1/proxy/upload/limited", token: token, body: body)
            #expect(refused.status == 413, "\(refused.text)")
            #expect(live.simulator.requests(route: "PUT /upload/limited") == 1)
            let small = [UInt8](repeating: 4, count: 512 << 10)
            let accepted = try await live.request("PUT", "/v1/proxy/upload/limited", token: token, body: small)
            #expect(accepted.status == 200)
            #expect(accepted.json?["sha256"] as? String == Hex.encode(SHA256.hash(small)))
            try await Self.poll("the spool to be given back") {
                let metrics = (try? await live.request("GET", "/metrics").text) ?? ""
                return metrics.split(separator: "\n").contains("parley_spool_bytes 0.0")
            }
        }
    }

    /// The cost of a body that passes through: the answer goes back once the client's body is
    /// in. A full-duplex upstream that answers at once and reads the body only once its
    /// answer (larger than the buffers between) has been taken: through the spool the
    /// client's body arrives meanwhile and the whole answer comes back; through the pipe the
    /// transfer stalls, ends at the paused-transfer deadline, and the answer is cut short.
    @Test(arguments: ["sim", "plain"])
    func aFullDuplexUpstreamStallsAPipedBodyUntilThePausedDeadline(destination: String) async throws {
        var duplex = HostileAnswer(.response(headers: [("Content-Type", "application/octet-stream")], body: [UInt8](repeating: 0x61, count: 32 << 20)))
        duplex.answersBeforeBody = true
        let upstream = try HostileUpstream(cases: ["duplex": duplex])
        defer { upstream.stop() }
        try await withLiveParley(
            destinations: { _ in Self.plainAndBasic("http://127.0.0.1:\(upstream.port)") },
            adjust: { $0.transport.pausedTransferDeadline = .seconds(2) }
        ) { live in
            let (_, token) = try await live.register(destination, credentials: destination == "sim")
            let body = [UInt8](repeating: 6, count: 32 << 20)
            let started = ContinuousClock.now
            let outcome: Result<RawHTTPResponse, any Error>
            do {
                outcome = .success(try await live.request("PUT", "/v1/proxy/case/duplex", token: token, body: body))
            } catch {
                outcome = .failure(error)
            }
            let took = ContinuousClock.now - started
            if destination == "sim" {
                let response = try outcome.get()
                #expect(response.status == 200)
                #expect(response.body.count == 32 << 20, "the whole answer, through the spool")
            } else {
                if case .success(let response) = outcome {
                    #expect(response.body.count < 32 << 20, "the answer was cut short: \(response.status), \(response.body.count) bytes")
                }
                #expect(took >= .seconds(2), "ended by the paused-transfer deadline, after \(took)")
                #expect(took < .seconds(30), "and not later: \(took)")
            }
            #expect(upstream.count("duplex") == 1)
        }
    }

    static let plainAndBasic: @Sendable (String) -> [DestinationSpec] = { url in
        [DestinationSpec(name: "sim", url: url, basic: .init()), DestinationSpec(name: "plain", url: url)]
    }

    /// A large upload streams on to the upstream while it arrives; when the client goes away
    /// halfway, the exchange ends, the spool's share is given back and the process goes on.
    /// Spooled (`sim`, with Basic) or passing through (`plain`).
    @Test(arguments: ["sim", "plain"])
    func anUploadThatBreaksOffEndsItsExchangeAndFreesTheSpool(destination: String) async throws {
        try await withLiveParley(destinations: Self.plainAndBasic) { live in
            let (_, token) = try await live.register(destination, credentials: destination == "sim")
            let fd = try RawHTTP.connectLoopback(port: live.port, timeout: 10)
            let head = "POST /v1/proxy/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n"
                + "Content-Length: \(4 << 20)\r\n\r\n"
            let bytes = Array(head.utf8) + [UInt8](repeating: 9, count: 3 << 19)  // 1.5 of the 4 MiB announced
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
                guard n > 0 else { break }
                offset += n
            }
            #expect(offset == bytes.count)
            // The upstream has the request before the body is whole: it streams.
            try await Self.poll("the upload reaching the upstream") { live.simulator.requests(route: "POST /upload") == 1 }
            close(fd)
            try await Self.poll("the spool to be given back") {
                let metrics = (try? await live.request("GET", "/metrics").text) ?? ""
                return metrics.split(separator: "\n").contains("parley_spool_bytes 0.0")
            }
            let body = (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
            let response = try await live.request("POST", "/v1/proxy/upload", token: token, body: body)
            #expect(response.status == 200)
            #expect(response.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            #expect(live.simulator.requests(route: "POST /upload") == 2)
            #expect(try FileManager.default.contentsOfDirectory(atPath: live.spoolDirectory).isEmpty)
        }
    }

    /// A body sent chunked, without a length, that outgrows memory streams on to the upstream
    /// while it arrives (chunked again), and arrives whole: spooled (`sim`) or passing
    /// through (`plain`).
    @Test(arguments: ["sim", "plain"])
    func aChunkedUploadStreamsOnWhileItArrives(destination: String) async throws {
        try await withLiveParley(destinations: Self.plainAndBasic) { live in
            let (_, token) = try await live.register(destination, credentials: destination == "sim")
            let fd = try RawHTTP.connectLoopback(port: live.port, timeout: 10)
            defer { close(fd) }
            func send(_ bytes: [UInt8]) {
                var offset = 0
                while offset < bytes.count {
                    let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
                    guard n > 0 else { return }
                    offset += n
                }
            }
            func chunk(_ bytes: ArraySlice<UInt8>) -> [UInt8] { Array("\(String(bytes.count, radix: 16))\r\n".utf8) + bytes + [13, 10] }
            let body = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 3) }
            send(Array(
                ("POST /v1/proxy/echo/chunked HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n"
                    + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").utf8))
            let half = 3 << 19  // 1.5 MiB, in 64 KiB chunks
            for start in stride(from: 0, to: half, by: 64 << 10) { send(chunk(body[start..<min(start + (64 << 10), half)])) }
            // The upstream has the request before the body is whole: it streams.
            try await Self.poll("the chunked upload reaching the upstream") { live.simulator.requests(route: "ANY /echo") == 1 }
            for start in stride(from: half, to: body.count, by: 64 << 10) { send(chunk(body[start..<min(start + (64 << 10), body.count)])) }
            send(Array("0\r\n\r\n".utf8))
            let response = try await RawHTTP.receive(fd: fd)
            #expect(response.status == 200)
            let echo = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
            #expect(echo?["bodyBytes"] as? Int == body.count)
            #expect(echo?["bodySha256"] as? String == Hex.encode(SHA256.hash(body)))
            // Sent on without a length (chunked: HTTP/1.1 has no other way for a request body).
            let headers = echo?["headers"] as? [String: [String]]
            #expect(headers != nil && headers?["content-length"] == nil, "\(headers ?? [:])")
            try await Self.poll("the spool to be given back") {
                let metrics = (try? await live.request("GET", "/metrics").text) ?? ""
                return metrics.split(separator: "\n").contains("parley_spool_bytes 0.0")
            }
        }
    }

    static func poll(_ what: String, within limit: Duration = .seconds(20), _ condition: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while await !condition() {
            guard ContinuousClock.now < deadline else { throw TestHarnessError("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func upstreamFailuresBecomeProblems() async throws {
        let closedPort = try FreePort.find()
        try await withLiveParley(destinations: { url in
            var slow = DestinationSpec(name: "slow", url: url)
            slow.timeouts = .init(connectSeconds: 2, idleSeconds: 1, totalSeconds: 1)
            return [DestinationSpec(name: "sim", url: url), DestinationSpec(name: "down", url: "http://127.0.0.1:\(closedPort)"), slow]
        }) { live in
            let (_, down) = try await live.register("down", credentials: false)
            let unavailable = try await live.request("GET", "/v1/proxy/x", token: down)
            #expect(unavailable.status == 502)
            #expect(unavailable.json?["code"] as? String == "upstream_unavailable")
            let (_, slow) = try await live.register("slow", credentials: false)
            let timeout = try await live.request("GET", "/v1/proxy/slow?ms=5000", token: slow)
            #expect(timeout.status == 504)
            #expect(timeout.json?["code"] as? String == "upstream_timeout")
        }
    }

    @Test func unknownRoutesAndHealth() async throws {
        try await withLiveParley { live in
            let missing = try await live.request("GET", "/nope")
            #expect(missing.status == 404)
            #expect(missing.json?["code"] as? String == "not_found")
            #expect(try await live.request("GET", "/healthz").status == 200)
            #expect(try await live.request("GET", "/readyz").status == 200)
            let metrics = try await live.request("GET", "/metrics")
            #expect(metrics.text.contains("parley_http_requests_total"))
        }
    }
}
