import ParleyEncoding
import AuthFlows
import Foundation
import ParleyCrypto
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Synchronization
import Testing

/// End to end against the SMP-like simulator: registration with APPCID, cookie
/// sessions, CSRF, client certificates, a large replayed upload, deregistration.
@Suite(.serialized) struct SMPEndToEndTests {
    static func smpDestination(_ url: String) -> [DestinationSpec] {
        [DestinationSpec(name: "sim", url: url, csrf: true, basic: .init(), smp: .init(appId: "com.example.app"))]
    }

    @Test func registrationStoresTheAPPCIDSealedAndSendsIt() async throws {
        try await withLiveParley(destinations: Self.smpDestination) { live in
            let created = try await live.json(
                "POST", "/v1/registrations",
                ["destination": "sim", "deviceType": "Android", "deviceModel": "Pixel", "credentials": ["username": "alice", "password": "wonderland"]])
            #expect(created.status == 201, "\(created.text)")
            let json = try #require(created.json)
            let appcid = try #require(json["appcid"] as? String)
            #expect(json["status"] as? String == "active")
            let upstream = try #require(live.simulator.smp.registrations[appcid])
            #expect(upstream.deviceType == "Android")
            #expect(upstream.deviceModel == "Pixel")
            #expect(created.headers("Set-Cookie").isEmpty)

            // Sealed at rest: the APPCID is not in any column as text.
            let row = try await live.store.query("SELECT appcid_sealed FROM registrations")[0]
            let sealed = try row.bytes("appcid_sealed")
            #expect(!String(decoding: sealed, as: UTF8.self).contains(appcid))

            let token = try #require(json["clientToken"] as? String)
            let check = try await live.request("GET", "/v1/proxy/api/appcid", token: token)
            #expect(check.json?["appcid"] as? String == appcid)
            #expect(check.json?["known"] as? Bool == true)

            #expect(try await live.request("DELETE", "/v1/registrations/me", token: token).status == 204)
            #expect(live.simulator.smp.deletedAppcids.contains(appcid))
            #expect(try await live.stateCounts() == ["registrations": 0, "tokens": 0, "cookies": 0, "flows": 0])
            let audit = try await live.store.query("SELECT action FROM audit_events ORDER BY id").map { try $0.string("action") }
            #expect(audit == ["registration.created", "registration.deleted"])
        }
    }

    @Test func refusedCredentialsStoreNothing() async throws {
        try await withLiveParley(destinations: Self.smpDestination) { live in
            let refused = try await live.json(
                "POST", "/v1/registrations", ["destination": "sim", "credentials": ["username": "alice", "password": "nope"]])
            #expect(refused.status == 403)
            #expect(refused.json?["code"] as? String == "upstream_unauthorized")
            #expect(!refused.text.contains("nope"))
            #expect(try await live.stateCounts() == ["registrations": 0, "tokens": 0, "cookies": 0, "flows": 0])
        }
    }

    @Test func sessionCookiesStayInTheJarAndNeverCrossRegistrations() async throws {
        try await withLiveParley { live in
            let (_, tokenA) = try await live.register()
            let first = try await live.request("GET", "/v1/proxy/api/data", token: tokenA)
            #expect(first.status == 200)
            #expect(first.headers("Set-Cookie").isEmpty)
            let challenges = live.simulator.smp.basicChallenges
            let second = try await live.request("GET", "/v1/proxy/api/data", token: tokenA)
            #expect(second.status == 200)
            #expect(live.simulator.smp.basicChallenges == challenges, "the session cookie was reused")
            let cookieRow = try await live.store.query("SELECT name, value_sealed FROM cookies")
            #expect(try cookieRow.map { try $0.string("name") } == ["SMPSESSION"])

            // B has wrong credentials: if A's session leaked to B, B would get 200.
            let b = try await live.json("POST", "/v1/registrations", ["destination": "sim", "credentials": ["username": "alice", "password": "bad"]])
            let tokenB = try #require(b.json?["clientToken"] as? String)
            #expect(try await live.request("GET", "/v1/proxy/api/data", token: tokenB).status == 401)
            #expect(try await live.request("GET", "/v1/proxy/api/appcid", token: tokenB).status == 401)
        }
    }

    @Test func csrfTokenIsFetchedCachedRefetchedAndNeverReturned() async throws {
        try await withLiveParley(destinations: { [DestinationSpec(name: "sim", url: $0, csrf: true, basic: .init())] }) { live in
            let (_, token) = try await live.register()
            let body = Array("{\"item\":1}".utf8)
            let first = try await live.request("POST", "/v1/proxy/csrf/items", token: token, headers: [("Content-Type", "application/json")], body: body)
            #expect(first.status == 201, "\(first.text)")
            #expect(first.header("X-CSRF-Token") == nil)
            #expect(first.json?["sha256"] as? String == Hex.encode(SHA256.hash(body)))
            #expect(try await live.request("POST", "/v1/proxy/csrf/items", token: token, body: body).status == 201)
            #expect(live.simulator.smp.csrfFetches == 1)
            _ = try await RawHTTP.request(port: live.simulatorPort, method: "POST", target: "/sim/csrf/rotate")
            let afterRotation = try await live.request("POST", "/v1/proxy/csrf/items", token: token, body: body)
            #expect(afterRotation.status == 201)
            #expect(live.simulator.smp.csrfFetches == 2)
            let fetch = try await live.request("GET", "/v1/proxy/csrf/items", token: token, headers: [("X-CSRF-Token", "Fetch")])
            #expect(fetch.header("X-CSRF-Token") == nil, "an upstream CSRF token reached the client")
        }
    }

    @Test func clientCertificateFromDestinationAndFromRegistration() async throws {
        let certificates = try TestCertificates.generate()
        let frontend = Mutex<TLSFrontend?>(nil)
        defer {
            frontend.withLock { $0?.stop(); $0?.remove() }
            certificates.remove()
        }
        try await withLiveParley(setUp: { simulatorPort in
            let started = try await TLSFrontend.start(certificates: certificates, upstreamPort: simulatorPort)
            frontend.withLock { $0 = started }
            let ca = String(decoding: certificates.caPEM, as: UTF8.self)
            var shared = DestinationSpec(name: "mtls", url: started.baseURL)
            shared.caCertificate = ca
            shared.clientCertificate = .init(pkcs12: Base64.encode(certificates.clientPKCS12), password: certificates.clientPKCS12Password)
            var perRegistration = DestinationSpec(name: "mtls-own", url: started.baseURL)
            perRegistration.caCertificate = ca
            return [shared, perRegistration]
        }) { live in
            let (_, sharedToken) = try await live.register("mtls", credentials: false)
            let viaShared = try await live.request("GET", "/v1/proxy/echo/mtls", token: sharedToken)
            #expect(viaShared.status == 200, "\(viaShared.text)")

            let (_, without) = try await live.register("mtls-own", credentials: false)
            let refused = try await live.request("GET", "/v1/proxy/echo/mtls", token: without)
            #expect(refused.status == 502)
            #expect(refused.json?["code"] as? String == "upstream_unavailable")

            let (_, own) = try await live.register(
                "mtls-own", credentials: false,
                extra: ["clientCertificate": ["pkcs12": Base64.encode(certificates.clientPKCS12), "password": certificates.clientPKCS12Password]])
            #expect(try await live.request("GET", "/v1/proxy/echo/mtls", token: own).status == 200)
            let me = try await live.request("GET", "/v1/registrations/me", token: own)
            #expect(!me.text.contains("pkcs12"))
        }
    }

    @Test func largeUploadIsReplayedAfterTheChallengeAndArrivesIntact() async throws {
        try await withLiveParley { live in
            let (_, token) = try await live.register()
            let mebibytes = Int(ProcessInfo.processInfo.environment["PARLEY_TEST_UPLOAD_MIB"] ?? "") ?? 500
            let block = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 17) }
            var body: [UInt8] = []
            body.reserveCapacity(mebibytes << 20)
            let hasher = SHA256Hasher()
            for _ in 0..<mebibytes {
                body.append(contentsOf: block)
                hasher.update(block)
            }
            let expected = Hex.encode(hasher.finalize())
            let response = try await live.request("POST", "/v1/proxy/secure/upload", token: token, body: body)
            #expect(response.status == 200, "\(response.text)")
            #expect(response.json?["sha256"] as? String == expected)
            #expect(response.json?["bytes"] as? Int == body.count)
            #expect(live.simulator.smp.secureUploadChallenges == 1)
            #expect(live.simulator.smp.secureUploadSuccesses == 1)
            #expect(try FileManager.default.contentsOfDirectory(atPath: live.spoolDirectory).isEmpty, "the spool file was removed")
        }
    }
}
