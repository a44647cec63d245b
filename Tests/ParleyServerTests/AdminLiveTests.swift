import AuthFlows
import Foundation
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Testing

/// The administration API against real PostgreSQL, the simulator's authorization server,
/// and two instances.
@Suite(.serialized) struct AdminLiveTests {
    static let admin = [("Authorization", "Bearer admin-token-0123456789-0123456789abcdefghijk")]

    static func adminJSON(_ live: LiveParley, _ method: String, _ target: String, _ body: [String: Any]? = nil) async throws -> RawHTTPResponse {
        var headers = admin
        var bytes: [UInt8] = []
        if let body {
            headers.append(("Content-Type", "application/json"))
            bytes = Array(try JSONSerialization.data(withJSONObject: body))
        }
        return try await live.request(method, target, headers: headers, body: bytes)
    }

    /// No admin answer carries a flow's secret: a `login_required` registration's flow shows
    /// with `url: null`, while its own client still gets the URL.
    @Test func adminAnswersCarryNoFlowSecret() async throws {
        try await withLiveParley(destinations: { url in
            var destination = OAuth2Tests.destination(url, grant: "authorization_code", clientID: "parley-public", secret: nil)
            destination.smp = .init(appId: "com.example.app")
            return [destination]
        }) { live in
            let created = try await live.json("POST", "/v1/registrations", ["destination": "as"])
            #expect(created.json?["status"] as? String == "login_required", "\(created.text)")
            let id = try #require(created.json?["id"] as? String)
            let token = try #require(created.json?["clientToken"] as? String)
            let own = try await live.request("GET", "/v1/registrations/me", token: token)
            #expect(((own.json?["flow"] as? [String: Any])?["url"] as? String)?.contains("?k=") == true)
            for target in ["/admin/v1/registrations", "/admin/v1/registrations/\(id)", "/admin/v1/audit", "/admin/v1/registrations?destination=as"] {
                let answer = try await Self.adminJSON(live, "GET", target)
                #expect(answer.status == 200)
                #expect(!answer.text.contains("k="), "\(target) carries a flow secret: \(answer.text)")
            }
            let detail = try await Self.adminJSON(live, "GET", "/admin/v1/registrations/\(id)")
            let flow = try #require(detail.json?["flow"] as? [String: Any])
            #expect(flow["id"] as? String == (created.json?["flow"] as? [String: Any])?["id"] as? String)
            #expect(flow["url"] is NSNull)
        }
    }

    @Test func pagingAcross1200RegistrationsWhileNewOnesArrive() async throws {
        try await withLiveParley { live in
            var existing = Set<String>()
            for n in 0..<1200 {
                let (id, _) = try await live.register("sim", credentials: false, extra: ["userHint": "user-\(n % 10)"])
                existing.insert(id)
            }
            var seen: [String] = []
            var cursor: String?
            var inserted = 0
            repeat {
                let page = try await Self.adminJSON(live, "GET", "/admin/v1/registrations?limit=500" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(page.status == 200)
                let items = page.json?["items"] as? [[String: Any]] ?? []
                seen += items.compactMap { $0["id"] as? String }
                cursor = page.json?["nextCursor"] as? String
                // Registrations made while paging sort before the cursor: never in a later page.
                for _ in 0..<5 {
                    _ = try await live.register("sim", credentials: false)
                    inserted += 1
                }
            } while cursor != nil
            #expect(seen.count == Set(seen).count, "a registration appeared twice")
            #expect(Set(seen) == existing, "a registration was skipped, or a new one slipped in")
            #expect(inserted >= 15)
            let hinted = try await Self.adminJSON(live, "GET", "/admin/v1/registrations?userHint=user-3&limit=500")
            #expect((hinted.json?["items"] as? [Any])?.count == 120)
        }
    }

    @Test func revocationByEachFilterAndUpstream() async throws {
        try await withLiveParley(destinations: { [OAuth2Tests.destination($0, grant: "password")] }) { live in
            // Three registrations with password-grant tokens; two share a user hint.
            var tokens: [String] = []
            var ids: [String] = []
            for hint in ["ann", "ann", "bob"] {
                let (id, token) = try await live.register("as", extra: ["userHint": hint])
                #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
                tokens.append(token)
                ids.append(id)
            }
            #expect(try await live.stateCounts()["tokens"] == 3)
            let detail = try await Self.adminJSON(live, "GET", "/admin/v1/registrations/\(ids[0])")
            let metadata = try #require((detail.json?["tokens"] as? [[String: Any]])?.first)
            #expect(metadata["kind"] as? String == "password")
            #expect(metadata["expiresAt"] is String)
            #expect(Set(metadata.keys) == ["kind", "scopeKey", "expiresAt", "lastUsedAt"], "a token value in the admin view")

            // Nothing matched: revoked 0.
            let none = try await Self.adminJSON(live, "POST", "/admin/v1/revocations", ["userHint": "nobody"])
            #expect(none.json?["revoked"] as? Int == 0)
            // By user hint and destination together, revoking upstream: both tokens of each at RFC 7009.
            let before = (live.simulator.oauth.revocations(hint: "refresh_token"), live.simulator.oauth.revocations(hint: "access_token"))
            let byHint = try await Self.adminJSON(live, "POST", "/admin/v1/revocations", ["userHint": "ann", "destination": "as", "upstream": true])
            #expect(byHint.status == 200)
            #expect(byHint.json?["revoked"] as? Int == 2)
            #expect((byHint.json?["upstream"] as? [String: Any])?["failed"] as? Int == 0)
            #expect(live.simulator.oauth.revocations(hint: "refresh_token") == before.0 + 2)
            #expect(live.simulator.oauth.revocations(hint: "access_token") == before.1 + 2)
            #expect(try await live.stateCounts()["tokens"] == 1)
            // The next request of a revoked registration gets a new token by itself (password grant).
            let grants = live.simulator.oauth.tokenCalls(grant: "password")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: tokens[0]).status == 200)
            #expect(live.simulator.oauth.tokenCalls(grant: "password") == grants + 1)
            // By registration (token and cookie jar), by scope key.
            let byID = try await Self.adminJSON(live, "POST", "/admin/v1/revocations", ["registrationId": ids[2]])
            #expect((byID.json?["revoked"] as? Int ?? 0) >= 1)
            let byScope = try await Self.adminJSON(live, "POST", "/admin/v1/revocations", ["scopeKey": "http://127.0.0.1:\(live.simulatorPort)"])
            #expect(byScope.status == 200)
            #expect(try await live.stateCounts()["tokens"] == 0)
            // Every admin call is in the audit log, without secrets.
            let audit = try await Self.adminJSON(live, "GET", "/admin/v1/audit?limit=500")
            let actions = (audit.json?["items"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String }
            #expect(actions.filter { $0 == "admin.revocation" }.count == 4)
            #expect(actions.contains("admin.registration.read"))
            #expect(!audit.text.contains("wonderland"))
        }
    }

    @Test func adminTeardownAndAuditPaging() async throws {
        try await withLiveParley(destinations: { [SMPEndToEndTests.smpDestination($0)[0]] }) { live in
            let (id, token) = try await live.register("sim")
            #expect(try await live.request("GET", "/v1/registrations/me", token: token).status == 200)
            let deleted = try await Self.adminJSON(live, "DELETE", "/admin/v1/registrations/\(id)")
            #expect(deleted.status == 204)
            #expect(try await live.request("GET", "/v1/registrations/me", token: token).status == 401)
            #expect(try await live.stateCounts()["registrations"] == 0)
            // The audit log pages newest first without repeats.
            var ids: [Int] = []
            var cursor: String?
            repeat {
                let page = try await Self.adminJSON(live, "GET", "/admin/v1/audit?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                ids += (page.json?["items"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? Int }
                cursor = page.json?["nextCursor"] as? String
            } while cursor != nil && ids.count < 100
            #expect(ids == ids.sorted(by: >))
            #expect(Set(ids).count == ids.count)
            let deletedEvent = try await Self.adminJSON(live, "GET", "/admin/v1/audit?limit=500")
            let event = (deletedEvent.json?["items"] as? [[String: Any]] ?? []).first { $0["action"] as? String == "registration.deleted" }
            #expect(event?["actor"] as? String == "admin")
            #expect(event?["registrationId"] as? String == id)
            let future = try await Self.adminJSON(live, "GET", "/admin/v1/audit?since=2999-01-01T00:00:00Z")
            #expect((future.json?["items"] as? [Any])?.isEmpty == true)
            #expect(try await Self.adminJSON(live, "GET", "/admin/v1/audit?since=yesterday").status == 400)
        }
    }
}

/// Token use written in batches, and retention, against real PostgreSQL.
@Suite(.serialized) struct HousekeepingLiveTests {
    @Test func lastUseOfATokenReachesTheAdminView() async throws {
        try await withLiveParley(
            destinations: { [OAuth2Tests.destination($0, grant: "password")] }, adjust: { $0.housekeeping.tokenUsageInterval = .milliseconds(50) }
        ) { live in
            let (id, token) = try await live.register("as")
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            #expect(try await live.request("GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            var lastUsed: String?
            let deadline = ContinuousClock.now + .seconds(3)
            while lastUsed == nil && ContinuousClock.now < deadline {
                let detail = try await AdminLiveTests.adminJSON(live, "GET", "/admin/v1/registrations/\(id)")
                lastUsed = ((detail.json?["tokens"] as? [[String: Any]])?.first?["lastUsedAt"]) as? String
                if lastUsed == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(lastUsed?.hasSuffix("Z") == true, "last_used_at was never written")
        }
    }

    @Test func retentionPurgesExpiredFlowsAndCookiesAndOldAuditEvents() async throws {
        try await withLiveParley { live in
            let (id, _) = try await live.register("sim", credentials: false)
            try await live.store.execute(
                """
                INSERT INTO cookies (registration_id, domain, path, name, value_sealed, host_only, secure, http_only, expires_at)
                VALUES (\(UUID(uuidString: id)), 'x.example', '/', 'old', '\\x00'::bytea, true, false, false, now() - interval '1 minute'),
                       (\(UUID(uuidString: id)), 'x.example', '/', 'new', '\\x00'::bytea, true, false, false, now() + interval '1 hour')
                """)
            try await live.store.execute(
                """
                INSERT INTO flows (id, registration_id, kind, purpose, secret_hash, status, expires_at, created_at)
                VALUES (\(UUID()), \(UUID(uuidString: id)), 'oauth2', 'login', '\\x01'::bytea, 'pending', now() - interval '2 hours', now() - interval '3 hours'),
                       (\(UUID()), \(UUID(uuidString: id)), 'oauth2', 'login', '\\x02'::bytea, 'pending', now() + interval '5 minutes', now())
                """)
            try await live.store.execute("INSERT INTO audit_events (actor, action, at) VALUES ('system', 'ancient', now() - interval '400 days')")
            let retention = PostgresAdministration(store: live.store, keyRing: testKeyRing())
            let removed = try await retention.purge(
                flowsBefore: Date().addingTimeInterval(-3600), cookiesBefore: Date(), auditBefore: Date().addingTimeInterval(-90 * 86_400))
            #expect(removed.flows == 1 && removed.cookies == 1 && removed.audit == 1)
            let counts = try await live.stateCounts()
            #expect(counts["cookies"] == 1 && counts["flows"] == 1)
            #expect(try await live.store.query("SELECT count(*) AS n FROM audit_events WHERE action = 'ancient'")[0].int("n") == 0)
        }
    }
}
