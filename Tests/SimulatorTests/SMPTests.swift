import ParleyEncoding
import Conversation
import CurlTransport
import Foundation
import ParleyCrypto
import ParleyTesting
import Testing
import UpstreamSimulator

@Suite("SMP behaviour of the upstream simulator")
struct SMPTests {
    @Test("registration answers 201 with an APPCID cookie, and DELETE removes it")
    func registerAndDelete() async throws {
        try await withSimulator { port, state in
            let path = "/odata/applications/latest/com.example.app/Connections"
            let refused = try await RawHTTP.request(
                port: port, method: "POST", target: path, headers: [("Content-Type", "application/json")], body: Array("{}".utf8))
            #expect(refused.status == 401)
            #expect(refused.header("WWW-Authenticate") == "Basic realm=\"smp\"")
            #expect(state.smp.basicChallenges == 1)

            let created = try await RawHTTP.request(
                port: port, method: "POST", target: path, headers: [basicAuthorization(), ("Content-Type", "application/json")],
                body: Array(#"{"DeviceType":"Android","DeviceModel":"Pixel 9"}"#.utf8))
            #expect(created.status == 201)
            let appcid = try #require(setCookie("X-SMP-APPCID", in: created))
            let session = try #require(setCookie("SMPSESSION", in: created))
            #expect(created.headers("Set-Cookie").allSatisfy { $0.hasSuffix("; Path=/; HttpOnly") })
            let d = try #require(created.json?["d"] as? [String: Any])
            #expect(d["ApplicationConnectionId"] as? String == appcid)
            #expect(d["DeviceType"] as? String == "Android")
            #expect(d["DeviceModel"] as? String == "Pixel 9")
            #expect(UUID(uuidString: appcid) != nil)
            #expect(state.smp.registrations[appcid]?.deviceModel == "Pixel 9")
            #expect(state.smp.registrations[appcid]?.appId == "com.example.app")
            #expect(state.smp.registeredAppcids == [appcid])
            #expect(state.smp.sessionsCreated == 1)

            // The session stands in for Basic; the APPCID header is recognised.
            let cookie = ("Cookie", "SMPSESSION=\(session); X-SMP-APPCID=\(appcid)")
            let known = try await RawHTTP.request(
                port: port, method: "GET", target: "/api/appcid", headers: [cookie, ("X-SMP-APPCID", appcid)])
            #expect(known.status == 200)
            #expect(known.json?["appcid"] as? String == appcid)
            #expect(known.json?["known"] as? Bool == true)
            #expect(setCookie("SMPSESSION", in: known) == nil)
            let none = try await RawHTTP.request(port: port, method: "GET", target: "/api/appcid", headers: [cookie])
            #expect(none.json?["appcid"] is NSNull)
            #expect(none.json?["known"] as? Bool == false)

            let deleted = try await RawHTTP.request(
                port: port, method: "DELETE", target: "/odata/applications/latest/com.example.app/Connections('\(appcid)')",
                headers: [cookie])
            #expect(deleted.status == 200)
            #expect(state.smp.deletedAppcids == [appcid])
            #expect(state.smp.registeredAppcids.isEmpty)
            let again = try await RawHTTP.request(
                port: port, method: "DELETE", target: "/odata/applications/latest/com.example.app/Connections('\(appcid)')",
                headers: [basicAuthorization()])
            #expect(again.status == 404)
            let unknown = try await RawHTTP.request(
                port: port, method: "DELETE", target: "/odata/applications/latest/com.example.app/Connections(%27nope%27)",
                headers: [cookie])
            #expect(unknown.status == 404)
            let stale = try await RawHTTP.request(port: port, method: "GET", target: "/api/appcid", headers: [cookie, ("X-SMP-APPCID", appcid)])
            #expect(stale.json?["known"] as? Bool == false)
        }
    }

    @Test("Basic opens a session; the cookie alone is then enough, a forged one is not")
    func sessions() async throws {
        try await withSimulator { port, state in
            let first = try await RawHTTP.request(port: port, method: "GET", target: "/api/data", headers: [basicAuthorization()])
            #expect(first.status == 200)
            let session = try #require(setCookie("SMPSESSION", in: first))
            #expect(first.header("Set-Cookie") == "SMPSESSION=\(session); Path=/; HttpOnly")

            let withCookie = try await RawHTTP.request(
                port: port, method: "GET", target: "/api/data", headers: [("Cookie", "other=1; SMPSESSION=\(session)")])
            #expect(withCookie.status == 200)
            #expect(withCookie.header("Set-Cookie") == nil)

            let forged = try await RawHTTP.request(port: port, method: "GET", target: "/api/data", headers: [("Cookie", "SMPSESSION=forged")])
            #expect(forged.status == 401)
            let wrong = try await RawHTTP.request(port: port, method: "GET", target: "/api/data", headers: [basicAuthorization("alice", "nope")])
            #expect(wrong.status == 401)
            #expect(state.smp.sessionsCreated == 1)
            #expect(state.smp.basicChallenges == 2)

            let expired = try await RawHTTP.request(port: port, method: "POST", target: "/sim/sessions/expire")
            #expect(expired.status == 204)
            let afterExpiry = try await RawHTTP.request(
                port: port, method: "GET", target: "/api/data", headers: [("Cookie", "SMPSESSION=\(session)")])
            #expect(afterExpiry.status == 401)
        }
    }

    @Test("CSRF: fetch binds a token to the session; writes need it; rotation invalidates it")
    func csrf() async throws {
        try await withSimulator { port, state in
            let fetched = try await RawHTTP.request(
                port: port, method: "GET", target: "/csrf/items", headers: [basicAuthorization(), ("X-CSRF-Token", "Fetch")])
            #expect(fetched.status == 200)
            let token = try #require(fetched.header("X-CSRF-Token"))
            let session = try #require(setCookie("SMPSESSION", in: fetched))
            let cookie = ("Cookie", "SMPSESSION=\(session)")
            #expect(state.smp.csrfFetches == 1)

            let body = Array("payload".utf8)
            let missing = try await RawHTTP.request(port: port, method: "POST", target: "/csrf/items", headers: [cookie], body: body)
            #expect(missing.status == 403)
            #expect(missing.header("X-CSRF-Token") == "Required")
            let stranger = try await RawHTTP.request(
                port: port, method: "POST", target: "/csrf/items", headers: [basicAuthorization(), ("X-CSRF-Token", token)], body: body)
            #expect(stranger.status == 403, "a token is bound to its session; Basic alone opens another one")

            let accepted = try await RawHTTP.request(
                port: port, method: "POST", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", token)], body: body)
            #expect(accepted.status == 201)
            #expect(accepted.json?["bytes"] as? Int == body.count)
            #expect(accepted.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            let deleted = try await RawHTTP.request(
                port: port, method: "DELETE", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", token)])
            #expect(deleted.status == 200)

            let refetched = try await RawHTTP.request(
                port: port, method: "GET", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", "Fetch")])
            #expect(refetched.header("X-CSRF-Token") == token, "the token lasts as long as the session")

            let rotated = try await RawHTTP.request(port: port, method: "POST", target: "/sim/csrf/rotate")
            #expect(rotated.status == 204)
            let stale = try await RawHTTP.request(
                port: port, method: "PUT", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", token)], body: body)
            #expect(stale.status == 403)
            #expect(stale.header("X-CSRF-Token") == "Required")

            let fresh = try #require(
                try await RawHTTP.request(port: port, method: "GET", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", "Fetch")])
                    .header("X-CSRF-Token"))
            #expect(fresh != token)
            let retried = try await RawHTTP.request(
                port: port, method: "POST", target: "/csrf/items", headers: [cookie, ("X-CSRF-Token", fresh)], body: body)
            #expect(retried.status == 201)
            #expect(state.smp.csrfFetches == 3)
            #expect(state.smp.csrfRejections == 3)
            #expect(state.smp.csrfAccepted == 3)
        }
    }

    @Test("/secure/upload drains the body, challenges, then hashes the replayed body")
    func secureUploadWithRawHTTP() async throws {
        try await withSimulator { port, state in
            let body = SecureRandom.bytes(1 << 20)
            let challenged = try await RawHTTP.request(port: port, method: "POST", target: "/secure/upload", body: body)
            #expect(challenged.status == 401)
            #expect(challenged.header("WWW-Authenticate") == "Basic realm=\"smp\"")

            // A session does not replace Basic here.
            let login = try await RawHTTP.request(port: port, method: "GET", target: "/api/data", headers: [basicAuthorization()])
            let session = try #require(setCookie("SMPSESSION", in: login))
            let cookieOnly = try await RawHTTP.request(
                port: port, method: "PUT", target: "/secure/upload", headers: [("Cookie", "SMPSESSION=\(session)")], body: body)
            #expect(cookieOnly.status == 401)

            let accepted = try await RawHTTP.request(
                port: port, method: "POST", target: "/secure/upload", headers: [basicAuthorization()], body: body)
            #expect(accepted.status == 200)
            #expect(accepted.json?["bytes"] as? Int == body.count)
            #expect(accepted.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            #expect(state.smp.secureUploadChallenges == 2)
            #expect(state.smp.secureUploadSuccesses == 1)
        }
    }

    @Test("/secure/upload through libcurl: a spooled body is sent twice, 401 then 200")
    func secureUploadWithCurl() async throws {
        let size = 24 << 20
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sim-upload-\(UUID().uuidString)").path
        var pattern = [UInt8](repeating: 0, count: 1 << 20)
        for i in pattern.indices { pattern[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
        let hasher = SHA256Hasher()
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try #require(FileHandle(forWritingAtPath: path))
        for _ in 0..<(size >> 20) {
            try handle.write(contentsOf: pattern)
            hasher.update(pattern)
        }
        try handle.close()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let expected = Hex.encode(hasher.finalize())

        let transport = CurlTransport(logger: testLogger)
        defer { transport.shutdown() }
        try await withSimulator { port, state in
            let url = "http://127.0.0.1:\(port)/secure/upload"
            let first = try await transport.send(
                UpstreamRequest(method: "PUT", url: url, body: .file(path: path, length: Int64(size))))
            _ = try await first.body.collect(upTo: 1 << 16)
            #expect(first.status == 401)
            #expect(first.headers["WWW-Authenticate"] == "Basic realm=\"smp\"")

            let (name, value) = basicAuthorization()
            let second = try await transport.send(
                UpstreamRequest(method: "PUT", url: url, headers: [name: value], body: .file(path: path, length: Int64(size))))
            let answer = try await second.body.collect(upTo: 1 << 16)
            #expect(second.status == 200)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(answer)) as? [String: Any])
            #expect(json["bytes"] as? Int == size)
            #expect(json["sha256"] as? String == expected)
            #expect(state.smp.secureUploadChallenges == 1)
            #expect(state.smp.secureUploadSuccesses == 1)
        }
    }
}

@Suite("GET /cookies/set of the upstream simulator")
struct CookieJarRouteTests {
    @Test("n=20 sets 20 cookies jar1…jar20, each with a 24-character value, Path=/ and HttpOnly; n outside 0...50 is 400")
    func setsCookies() async throws {
        try await withSimulator { port, _ in
            let response = try await get(port, "/cookies/set?n=20")
            #expect(response.status == 200)
            #expect(response.json?["cookies"] as? Int == 20)
            let cookies = response.headers("Set-Cookie")
            #expect(cookies.count == 20)
            let pattern = try Regex(#"^jar([0-9]+)=([A-Za-z0-9_-]{24}); Path=/; HttpOnly$"#)
            var names: [Int] = []
            for cookie in cookies {
                let match = try #require(cookie.wholeMatch(of: pattern), "unexpected Set-Cookie: \(cookie)")
                names.append(try #require(Int(String(match.output[1].substring ?? ""))))
            }
            #expect(names.sorted() == Array(1...20))
            #expect(Set(cookies.map { $0.split(separator: ";")[0] }).count == 20)

            let none = try await get(port, "/cookies/set?n=0")
            #expect(none.status == 200)
            #expect(none.json?["cookies"] as? Int == 0)
            #expect(none.headers("Set-Cookie").isEmpty)

            for bad in ["51", "-1", "many"] {
                let refused = try await get(port, "/cookies/set?n=\(bad)")
                #expect(refused.status == 400)
                #expect(refused.text == "n must be in 0...50")
                #expect(refused.headers("Set-Cookie").isEmpty)
            }
            #expect(try await get(port, "/cookies/set").status == 400)
        }
    }
}
