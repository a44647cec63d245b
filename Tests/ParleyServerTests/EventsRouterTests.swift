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

/// The events endpoints at the router tier, on the in-memory outbox: what the registrations,
/// flows and revocations write with their changes is listed newest first, and the admin view is
/// the webhook body plus `deliveries` (one `Encodable` for both).
@Suite struct EventsRouterTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RouterTests.adminToken)"]

    @Test func aRevocationsEventIsListedAndSentAgainOnRequest() async throws {
        let dependencies = ParleyDependencies.inMemory()
        let events = try #require(dependencies.events as? InMemoryEvents)
        try await RouterTests.withRouter(dependencies: dependencies) { client in
            let created = RouterTests.json(
                try await client.execute(uri: "/v1/registrations", method: .post, body: ByteBuffer(string: #"{"destination":"sim"}"#)).body)
            let id = try #require(created["id"] as? String)
            try await client.execute(
                uri: "/admin/v1/revocations", method: .post, headers: Self.admin, body: ByteBuffer(string: #"{"registrationId":"\#(id)"}"#)
            ) { #expect($0.status == .ok) }

            let listed = try await client.execute(uri: "/admin/v1/events?type=registration.revoked", method: .get, headers: Self.admin)
            #expect(listed.status == .ok)
            let items = try #require(RouterTests.json(listed.body)["items"] as? [[String: Any]])
            #expect(items.count == 1)
            let item = try #require(items.first)
            #expect(item["type"] as? String == "registration.revoked" && item["registrationId"] as? String == id)
            #expect(item["destination"] as? String == "sim" && item["user"] is NSNull)
            #expect((item["detail"] as? [String: String]) == ["by": "admin", "reason": "revocation"])
            #expect(item["deliveries"] as? [Any] != nil)

            // The admin view is the webhook body, member for member, plus its deliveries.
            let stored = try #require(events.all.first { $0.type == "registration.revoked" })
            let body = try #require(try JSONSerialization.jsonObject(with: Data(WebhookBody.encode(stored))) as? [String: Any])
            #expect(Set(body.keys) == Set(item.keys).subtracting(["deliveries"]))
            #expect(body["id"] as? String == item["id"] as? String && body["at"] as? String == item["at"] as? String)

            let eventID = try #require(item["id"] as? String)
            #expect(try await client.execute(uri: "/admin/v1/events/\(eventID)/redelivery", method: .post, headers: Self.admin).status == .accepted)
            #expect(try await client.execute(uri: "/admin/v1/events/\(UUID())/redelivery", method: .post, headers: Self.admin).status == .notFound)
        }
    }
}
