import AuthFlows
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Testing

/// No admin answer carries a flow's secret: whoever holds a flow URL can sign in for its
/// registration, so administrators see a pending flow with `url: null`; only the
/// registration's own client gets the URL.
@Suite struct AdminFlowSecretRouterTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RouterTests.adminToken)"]

    /// SMP registrations behind an authorization-code login: `login_required` with a flow, at
    /// once (`open`) or once approved (`approval`).
    static func configuration() throws -> ParleyConfiguration {
        func smp(_ name: String, policy: String?) throws -> Destination {
            var spec = DestinationSpec(name: name, url: "https://\(name).example", smp: .init(appId: "com.example.app"))
            spec.oauth2 = .init(
                grant: "authorization_code", authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example/token",
                revocationEndpoint: nil, clientId: "parley", clientSecret: nil, clientAuthentication: nil, scopes: nil, scopeKeys: nil,
                challenge: nil)
            spec.registration = .init(policy: policy)
            return try spec.validated()
        }
        return ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""),
            keys: .init(keyRing: testKeyRing(), adminTokens: [RouterTests.adminToken]),
            destinations: [try smp("smp", policy: nil), try smp("approve", policy: "approval")])
    }

    /// No `k=` in the answer, and every flow object in it has `url: null`.
    static func expectNoFlowSecret(_ response: TestResponse, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) -> Int {
        #expect(response.status == .ok, "\(what)", sourceLocation: sourceLocation)
        let text = String(buffer: response.body)
        #expect(!text.contains("k="), "\(what) carries a flow secret: \(text)", sourceLocation: sourceLocation)
        let object = RouterTests.json(response.body)
        let registrations = (object["items"] as? [[String: Any]]) ?? [object]
        let flows = registrations.compactMap { $0["flow"] as? [String: Any] }
        for flow in flows {
            #expect(flow.keys.sorted() == ["error", "expiresAt", "id", "kind", "status", "url"], "\(what)", sourceLocation: sourceLocation)
            #expect(flow["url"] is NSNull, "\(what): \(flow)", sourceLocation: sourceLocation)
        }
        return flows.count
    }

    @Test func adminAnswersShowFlowsWithoutTheirURL() async throws {
        let dependencies = ParleyDependencies.inMemory(transport: FakeTransport { _ in .text(401) })
        let app = try buildApplication(configuration: try Self.configuration(), dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in
            // The client's own answers carry the flow URL with its secret.
            let (id, token, url) = try await client.execute(
                uri: "/v1/registrations", method: .post, body: try RouterTests.body(["destination": "smp"])
            ) { response in
                let object = RouterTests.json(response.body)
                #expect(object["status"] as? String == "login_required")
                let flow = object["flow"] as? [String: Any]
                return (object["id"] as? String ?? "", object["clientToken"] as? String ?? "", flow?["url"] as? String ?? "")
            }
            #expect(url.hasPrefix("https://parley.example/flows/") && url.contains("?k="))
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                #expect((RouterTests.json(response.body)["flow"] as? [String: Any])?["url"] as? String == url)
            }

            // Administrators see the same flow without it, in the list and in the detail.
            let listed = try await client.execute(uri: "/admin/v1/registrations", method: .get, headers: Self.admin) {
                Self.expectNoFlowSecret($0, "the registration list")
            }
            #expect(listed == 1)
            let detailed = try await client.execute(uri: "/admin/v1/registrations/\(id)", method: .get, headers: Self.admin) { response in
                #expect((RouterTests.json(response.body)["flow"] as? [String: Any])?["id"] as? String == url.split(separator: "/").last?.split(separator: "?").first.map(String.init))
                return Self.expectNoFlowSecret(response, "the registration")
            }
            #expect(detailed == 1)

            // An approval that leads to a login: the answer names the flow, without its URL.
            let pending = try await client.execute(uri: "/v1/registrations", method: .post, body: try RouterTests.body(["destination": "approve"])) {
                RouterTests.json($0.body)["id"] as? String ?? ""
            }
            let approved = try await client.execute(uri: "/admin/v1/registrations/\(pending)/approval", method: .post, headers: Self.admin) { response in
                #expect(RouterTests.json(response.body)["status"] as? String == "login_required")
                return Self.expectNoFlowSecret(response, "the approval")
            }
            #expect(approved == 1)
            #expect(try await client.execute(uri: "/admin/v1/registrations?limit=500", method: .get, headers: Self.admin) {
                Self.expectNoFlowSecret($0, "the list after the approval")
            } == 2)

            // Nor does any other admin answer.
            for target in ["/admin/v1/audit?limit=500", "/admin/v1/registrations?destination=smp", "/admin/v1/registrations?destination=approve"] {
                try await client.execute(uri: target, method: .get, headers: Self.admin) { response in
                    #expect(response.status == .ok)
                    #expect(!String(buffer: response.body).contains("k="), "\(target)")
                }
            }
        }
    }
}
