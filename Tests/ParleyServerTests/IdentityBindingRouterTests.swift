import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Testing

/// The binding of flows to a registration's user, through the real router with in-memory
/// storage: the first sign-in binds, a later sign-in as somebody else fails with
/// `identity_mismatch` and leaves the registration as it was.
@Suite struct IdentityBindingRouterTests {
    struct World {
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        let audit = InMemoryAudit()
        let upstream = HostedFlowRouterTests.FakeUpstream()

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { [upstream] in upstream.answer($0) })
            dependencies.registrations = registrations
            dependencies.flows = flows
            dependencies.audit = audit
            let router = try compose(
                configuration: try HostedFlowRouterTests.configuration(), dependencies: dependencies, metrics: Metrics(), logger: quietLogger
            ).router
            try await Application(router: router).test(.router) { try await body($0) }
        }
    }

    /// A basic flow of the registration (`POST /v1/flows`), posted the form with these credentials.
    static func signIn(
        _ client: any TestClientProtocol, token: String, username: String, password: String = "wonderland"
    ) async throws -> (id: String, response: TestResponse) {
        let flow = try await client.execute(
            uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
            body: ByteBuffer(string: "{\"kind\":\"basic\"}")
        ) { RouterTests.json($0.body) }
        let id = flow["id"] as? String ?? ""
        let k = (flow["url"] as? String)?.split(separator: "k=").last.map(String.init) ?? ""
        let response = try await client.execute(
            uri: "/flows/\(id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
            body: ByteBuffer(string: "k=\(k)&username=\(username)&password=\(password)"))
        return (id, response)
    }

    @Test func theFirstSignInBindsAndSomebodyElseNeverReachesTheRegistration() async throws {
        let world = World()
        try await world.run { client in
            let token = try await HostedFlowRouterTests.register(client, "form")
            // The first completed sign-in binds the registration to alice.
            let first = try await Self.signIn(client, token: token, username: "alice")
            #expect(first.response.status == .seeOther)
            let bound = try #require(world.registrations.all.first)
            #expect(bound.user == RegistrationUser(issuer: "https://form.example", subject: "alice", verified: false, match: "alice"))
            let sealed = try #require(bound.credentialsSealed)
            #expect(world.audit.events.contains { $0.action == "registration.user_bound" })

            // Mallory signs in on alice's registration: the flow fails, nothing is sent upstream,
            // the stored credentials stay alice's.
            let seen = world.upstream.count
            let second = try await Self.signIn(client, token: token, username: "mallory", password: "whatever")
            #expect(second.response.status == .seeOther)
            #expect(second.response.headers[.location] == "https://parley.example/flows/\(second.id)/done")
            let failed = try #require(world.flows.all.first { $0.idString == second.id })
            #expect(failed.status == .failed)
            #expect(failed.error == "identity_mismatch")
            #expect(world.upstream.count == seen, "a sign-in as somebody else is not tried upstream")
            #expect(world.registrations.all.first?.credentialsSealed == sealed)
            #expect(world.registrations.all.first?.user?.subject == "alice")
            let mismatch = try #require(world.audit.events.first { $0.action == "flow.identity_mismatch" })
            #expect(mismatch.detail["expectedIssuer"] == "https://form.example")
            #expect(mismatch.detail.values.allSatisfy { !$0.contains("mallory") && !$0.contains("whatever") }, "issuers only")
            try await client.execute(uri: "/v1/flows/\(second.id)", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                let flow = RouterTests.json(response.body)
                #expect(flow["status"] as? String == "failed")
                #expect(flow["error"] as? String == "identity_mismatch")
            }

            // "ALICE" is alice to the binding (case is ignored): the gate lets it through to the
            // upstream, which here knows only "alice", so the form asks again; the flow goes on.
            let again = try await Self.signIn(client, token: token, username: "ALICE")
            #expect(again.response.status == .ok)
            #expect(world.flows.all.first { $0.idString == again.id }?.status == .pending)
            #expect(world.upstream.count > seen)
        }
    }
}
