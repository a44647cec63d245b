import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Testing

/// Revocation by user against PostgreSQL with two instances: every registration of the user,
/// on both destinations, loses its tokens and cookie jar, and neither instance sends the old
/// session cookie or token again within a second.
@Suite(.serialized) struct AdminUserLiveTests {
    static let admin = [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk"), ("Content-Type", "application/json")]

    /// Token rows plus non-empty cookie jars of the registrations.
    static func credentialRecords(_ live: LiveParley, _ ids: [String]) async throws -> Int {
        var count = 0
        for id in ids {
            guard let uuid = UUID(uuidString: id) else { continue }
            count += try await live.store.query("SELECT count(*) AS n FROM tokens WHERE registration_id = \(uuid)")[0].int("n")
            count += try await live.store.query("SELECT count(*) AS n FROM cookies WHERE registration_id = \(uuid)")[0].int("n") > 0 ? 1 : 0
        }
        return count
    }

    @Test func aRevocationByUserStopsEveryInstanceUsingTheUsersCredentialsOnEveryDestination() async throws {
        var options = LiveOptions()
        options.instances = 2
        try await withLiveParley(
            destinations: { SMPEndToEndTests.smpDestination($0) + [OAuth2Tests.destination($0, grant: "password")] }, options: options
        ) { a in
            let b = try #require(a.others.first)
            let registrations = PostgresRegistrations(store: a.store)
            let alice = RegistrationUser(issuer: "https://idp.example", subject: "alice-1", verified: true, match: "alice-1")
            let (simID, simToken) = try await a.register("sim")
            let (asID, asToken) = try await a.register("as")
            let (bobID, bobToken) = try await a.register("sim")
            for id in [simID, asID] { #expect(try await registrations.setUser(id: try #require(UUID(uuidString: id)), user: alice)) }
            #expect(
                try await registrations.setUser(
                    id: try #require(UUID(uuidString: bobID)),
                    user: RegistrationUser(issuer: "https://idp.example", subject: "bob-2", verified: true, match: "bob-2")))

            // B holds alice's session cookie and token in its caches, and bob's session.
            for _ in 0..<2 {
                #expect(try await b.request("GET", "/v1/proxy/api/data", token: simToken).status == 200)
                #expect(try await b.request("GET", "/v1/proxy/oauth-api/data", token: asToken).status == 200)
                #expect(try await b.request("GET", "/v1/proxy/api/data", token: bobToken).status == 200)
            }
            let tokenCalls = a.simulator.oauth.tokenCalls
            let sessions = a.simulator.smp.sessionsCreated
            let held = try await Self.credentialRecords(a, [simID, asID])
            #expect(held >= 2, "a session jar and a token row at least")

            let revoked = try await a.request(
                "POST", "/admin/v1/revocations", headers: Self.admin,
                body: Array(#"{"user":{"issuer":"https://idp.example","subject":"alice-1"}}"#.utf8))
            #expect(revoked.status == 200)
            #expect(revoked.json?["revoked"] as? Int == held)
            #expect(try await Self.credentialRecords(a, [simID, asID]) == 0)
            #expect(try await Self.credentialRecords(a, [bobID]) >= 1, "bob's session stays")

            // Within a second B opens a new session and obtains a new token instead of sending the old ones.
            let deadline = ContinuousClock.now + .seconds(1)
            var newSession = false
            var newToken = false
            while !(newSession && newToken) && ContinuousClock.now < deadline {
                if !newSession {
                    #expect(try await b.request("GET", "/v1/proxy/api/data", token: simToken).status == 200)
                    newSession = a.simulator.smp.sessionsCreated > sessions
                }
                if !newToken {
                    #expect(try await b.request("GET", "/v1/proxy/oauth-api/data", token: asToken).status == 200)
                    newToken = a.simulator.oauth.tokenCalls > tokenCalls
                }
            }
            #expect(newSession, "instance B kept sending alice's revoked session cookie")
            #expect(newToken, "instance B kept sending alice's revoked token")
            // A too.
            let afterB = a.simulator.smp.sessionsCreated
            #expect(try await a.request("GET", "/v1/proxy/api/data", token: simToken).status == 200)
            #expect(a.simulator.smp.sessionsCreated == afterB, "A uses the session B opened, not the revoked one")
            // Bob's session was not touched.
            #expect(try await b.request("GET", "/v1/proxy/api/data", token: bobToken).status == 200)
            #expect(a.simulator.smp.sessionsCreated == afterB, "bob's session was revoked too")
        }
    }
}
