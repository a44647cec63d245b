import AuthFlows
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyCrypto
import ParleyEncoding
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Testing

/// The administration API and registration policies through the router, on in-memory twins.
@Suite struct AdminRouterTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RouterTests.adminToken)"]
    static let enrolmentSecret = "enrol-0123456789abcdef"

    static func configuration() throws -> ParleyConfiguration {
        let open = try DestinationSpec(name: "sim", url: "https://sim.example", basic: .init()).validated()
        var enrol = DestinationSpec(name: "enrol", url: "https://enrol.example")
        enrol.registration = .init(policy: "enrolment", enrolmentSecretSha256: Hex.encode(SHA256.hash(Array(enrolmentSecret.utf8))))
        var approval = DestinationSpec(name: "approve", url: "https://approve.example")
        approval.registration = .init(policy: "approval")
        return ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
            keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
            destinations: [open, try enrol.validated(), try approval.validated()])
    }

    static func withRouter(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let app = try buildApplication(configuration: try configuration(), dependencies: .inMemory(), logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func register(_ client: any TestClientProtocol, _ destination: String, hint: String? = nil, headers: HTTPFields = [:])
        async throws -> TestResponse
    {
        var object: [String: Any] = ["destination": destination]
        if let hint { object["userHint"] = hint }
        return try await client.execute(uri: "/v1/registrations", method: .post, headers: headers, body: try RouterTests.body(object))
    }

    @Test func listsNewestFirstInPagesWithTokenMetadataAndNoValues() async throws {
        try await Self.withRouter { client in
            var ids: [String] = []
            for n in 0..<7 {
                let response = try await Self.register(client, "sim", hint: n % 2 == 0 ? "even" : "odd")
                ids.append(RouterTests.json(response.body)["id"] as? String ?? "")
            }
            var seen: [String] = []
            var cursor: String?
            repeat {
                let uri = "/admin/v1/registrations?limit=3" + (cursor.map { "&cursor=" + $0 } ?? "")
                let page = try await client.execute(uri: uri, method: .get, headers: Self.admin) { response in
                    #expect(response.status == .ok)
                    return RouterTests.json(response.body)
                }
                let items = page["items"] as? [[String: Any]] ?? []
                for item in items {
                    #expect(item["tokens"] is [Any])
                    #expect(item["appcid"] is NSNull)
                    #expect(item["clientToken"] == nil)
                }
                seen += items.compactMap { $0["id"] as? String }
                cursor = page["nextCursor"] as? String
            } while cursor != nil
            #expect(Set(seen) == Set(ids))
            #expect(seen.count == ids.count)
            let odd = try await client.execute(uri: "/admin/v1/registrations?userHint=odd", method: .get, headers: Self.admin) {
                RouterTests.json($0.body)["items"] as? [[String: Any]] ?? []
            }
            #expect(odd.count == 3)
            for bad in ["limit=0", "limit=501", "limit=x", "cursor=nonsense", "cursor=" + Base64URL.encode(Array("1:x".utf8)), "userHint=a%00b"] {
                RouterTests.expectProblem(
                    try await client.execute(uri: "/admin/v1/registrations?\(bad)", method: .get, headers: Self.admin), .badRequest, "invalid_request")
            }
        }
    }

    @Test func revocationNeedsAFilterAndCountsWhatItRemoved() async throws {
        try await Self.withRouter { client in
            let id = RouterTests.json(try await Self.register(client, "sim").body)["id"] as? String ?? ""
            for body in ["{}", "{\"upstream\":true}", "{\"registrationId\":\"not-a-uuid\"}", "{\"destination\":\"\"}", "{\"userHint\":\"a\\u0000b\"}"] {
                RouterTests.expectProblem(
                    try await client.execute(uri: "/admin/v1/revocations", method: .post, headers: Self.admin, body: ByteBuffer(string: body)),
                    .badRequest, "invalid_request")
            }
            try await client.execute(
                uri: "/admin/v1/revocations", method: .post, headers: Self.admin, body: ByteBuffer(string: "{\"registrationId\":\"\(id)\"}")
            ) { response in
                #expect(response.status == .ok)
                let answer = RouterTests.json(response.body)
                #expect(answer["revoked"] as? Int == 0)
                #expect(answer["upstream"] is NSNull)
            }
        }
    }

    @Test func enrolmentPolicyRefusesAMissingOrWrongSecretAndStoresNothing() async throws {
        try await Self.withRouter { client in
            for headers: HTTPFields in [[:], [HTTPField.Name("Parley-Enrolment")!: "wrong-secret"]] {
                RouterTests.expectProblem(try await Self.register(client, "enrol", headers: headers), .forbidden, "forbidden")
            }
            let list = try await client.execute(uri: "/admin/v1/registrations", method: .get, headers: Self.admin) {
                RouterTests.json($0.body)["items"] as? [Any] ?? []
            }
            #expect(list.isEmpty)
            let ok = try await Self.register(client, "enrol", headers: [HTTPField.Name("Parley-Enrolment")!: Self.enrolmentSecret])
            #expect(ok.status == .created)
            let audit = try await client.execute(uri: "/admin/v1/audit?limit=50", method: .get, headers: Self.admin) {
                RouterTests.json($0.body)["items"] as? [[String: Any]] ?? []
            }
            #expect(audit.filter { $0["action"] as? String == "registration.refused" }.count == 2)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_registrations_total{action="refused"} 2"#), "\(metrics)")
            #expect(metrics.contains(#"parley_registrations_total{action="created"} 1"#), "\(metrics)")
            #expect(!String(describing: audit).contains("wrong-secret"), "the presented secret reached the audit log")
        }
    }

    /// A PKCS#12 costs key derivation: only a request the policy admitted gets that far. Refused
    /// by the enrolment policy, the upload is never opened (no import counted, `403`, not the
    /// `400` of an unusable certificate); admitted, it is imported once.
    @Test func aClientCertificateIsOpenedOnlyAfterThePolicyAdmitsTheRequest() async throws {
        try await Self.withRouter { client in
            let upload: [String: Any] = ["destination": "enrol", "clientCertificate": ["pkcs12": Base64.encode(Array(repeating: UInt8(0x30), count: 2048)), "password": "x"]]
            func imports() async throws -> String {
                let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
                return metrics.split(separator: "\n").first { $0.hasPrefix(#"parley_registrations_total{action="certificate_import"}"#) }.map(String.init) ?? "none"
            }
            for headers: HTTPFields in [[:], [HTTPField.Name("Parley-Enrolment")!: "wrong-secret"]] {
                let refused = try await client.execute(uri: "/v1/registrations", method: .post, headers: headers, body: try RouterTests.body(upload)) { $0 }
                RouterTests.expectProblem(refused, .forbidden, "forbidden")
            }
            #expect(try await imports() == "none")
            let admitted = try await client.execute(
                uri: "/v1/registrations", method: .post, headers: [HTTPField.Name("Parley-Enrolment")!: Self.enrolmentSecret],
                body: try RouterTests.body(upload)) { $0 }
            RouterTests.expectProblem(admitted, .badRequest, "invalid_request")
            #expect(try await imports() == #"parley_registrations_total{action="certificate_import"} 1"#)
        }
    }

    @Test func approvalPolicyWaitsForAnAdministrator() async throws {
        try await Self.withRouter { client in
            let created = RouterTests.json(try await Self.register(client, "approve").body)
            #expect(created["status"] as? String == "pending_approval")
            let id = created["id"] as? String ?? ""
            let auth: HTTPFields = [.authorization: "Bearer \(created["clientToken"] as? String ?? "")"]
            // No proxying and no flows while it waits; its own view works.
            RouterTests.expectProblem(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth), .forbidden, "forbidden")
            RouterTests.expectProblem(
                try await client.execute(uri: "/v1/flows", method: .post, headers: auth, body: ByteBuffer(string: "{}")), .forbidden, "forbidden")
            #expect(try await client.execute(uri: "/v1/registrations/me", method: .get, headers: auth).status == .ok)
            // Only an admin approves, once.
            RouterTests.expectProblem(
                try await client.execute(uri: "/admin/v1/registrations/\(id)/approval", method: .post, headers: auth), .unauthorized,
                "invalid_admin_token")
            try await client.execute(uri: "/admin/v1/registrations/\(id)/approval", method: .post, headers: Self.admin) { response in
                #expect(response.status == .ok)
                #expect(RouterTests.json(response.body)["status"] as? String == "active")
            }
            RouterTests.expectProblem(
                try await client.execute(uri: "/admin/v1/registrations/\(id)/approval", method: .post, headers: Self.admin), .badRequest,
                "invalid_request")
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"parley_registrations_total{action="approved"} 1"#), "\(metrics)")
            #expect(try await client.execute(uri: "/v1/proxy/x", method: .get, headers: auth).status != .forbidden)
            // Admin teardown.
            #expect(try await client.execute(uri: "/admin/v1/registrations/\(id)", method: .delete, headers: Self.admin).status == .noContent)
            RouterTests.expectProblem(try await client.execute(uri: "/v1/registrations/me", method: .get, headers: auth), .unauthorized, "invalid_client_token")
            RouterTests.expectProblem(
                try await client.execute(uri: "/admin/v1/registrations/\(id)", method: .delete, headers: Self.admin), .notFound, "not_found")
        }
    }

    @Test func aBadPolicyIsAConfigurationProblem() {
        var spec = DestinationSpec(name: "p", url: "https://p.example")
        spec.registration = .init(policy: "enrolment", enrolmentSecretSha256: "abc")
        #expect(throws: DestinationSpec.Invalid.self) { try spec.validated() }
        spec.registration = .init(policy: "sometimes")
        #expect(throws: DestinationSpec.Invalid.self) { try spec.validated() }
    }
}
