import Foundation
import ParleyTesting
import Store
import Synchronization
import Testing
import UpstreamSimulator

/// Faults an operator meets, against the real `parley` binary, real PostgreSQL and the upstream
/// simulator: an instance killed in the middle of a flow, the database failing over to a promoted
/// standby, the authorization server down and then throttling. In each, nothing stored is lost
/// and service comes back by itself, without restarting Parley.
@Suite(.serialized) struct FaultTests {
    // MARK: kill -9 in the middle of a flow

    /// Two instances behind one public URL (the test plays the load balancer). The flow starts on
    /// A; A dies with SIGKILL after sending the browser to the authorization server and before the
    /// callback; the callback and the thin client's long-poll land on B, which finishes the flow.
    @Test func anInstanceKilledMidFlowLeavesTheFlowToAnother() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let simulatorURL = "http://127.0.0.1:\(simulatorPort)"
            let destinations = try Self.destinationsFile(Self.authorizationCode(simulatorURL, tokenURL: simulatorURL))
            defer { try? FileManager.default.removeItem(atPath: destinations) }
            var env = ServeTests.environment(database: database, destinations: destinations)
            env["PARLEY_PUBLIC_URL"] = Self.publicURL
            let a = try await ParleyProcess.start(environment: env)
            let b = try await ParleyProcess.start(environment: env)
            defer {
                Task {
                    await a.stop()  // only if a failure came before the kill
                    await b.stop()
                }
            }

            let created = try await Self.request(a, "POST", "/v1/registrations", json: #"{"destination":"as"}"#)
            #expect(created.status == 201, "\(created.text)")
            let token = try #require(created.json?["clientToken"] as? String)
            let challenged = try await Self.request(a, "GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(challenged.status == 401)
            #expect(challenged.json?["code"] as? String == "interaction_required")
            let flow = try #require(challenged.json?["flow"] as? [String: Any])
            let flowID = try #require(flow["id"] as? String)
            let flowURL = try #require(flow["url"] as? String)

            // The thin client long-polls A; the browser opens the flow on A and is sent on to the AS.
            async let orphanedPoll = Self.request(a, "GET", "/v1/flows/\(flowID)?wait=30", token: token)
            let start = try await ConfirmationForm.confirm(port: a.port, target: try Self.path(of: flowURL))
            let authorize = try #require(start.onward)
            #expect(authorize.hasPrefix(simulatorURL + "/oauth/authorize?"))
            let query = try #require(authorize.split(separator: "?", maxSplits: 1).last.map(String.init))
            let loginPage = try await RawHTTP.request(port: simulatorPort, method: "GET", target: "/oauth/authorize?" + query)
            #expect(loginPage.status == 200)

            // A dies while the person signs in.
            a.signal(SIGKILL)
            #expect(try await a.waitForExit() == SIGKILL)
            #expect(a.process.terminationReason == .uncaughtSignal)
            #expect((try? await orphanedPoll) == nil, "a killed instance answered a long-poll")

            let login = try await RawHTTP.request(
                port: simulatorPort, method: "POST", target: "/oauth/authorize",
                headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array((query + "&username=alice&password=wonderland").utf8))
            #expect(login.status == 302)
            let callback = try #require(login.header("Location"))
            #expect(callback.hasPrefix(Self.publicURL + "/callback/oauth2?"))

            // The thin client polls again, now on B; the callback reaches B as well.
            let started = ContinuousClock.now
            async let waited = Self.request(b, "GET", "/v1/flows/\(flowID)?wait=30", token: token)
            let finished = try await Self.request(b, "GET", try Self.path(of: callback))
            #expect(finished.status == 303, "\(finished.text)")
            let status = try await waited
            #expect(status.status == 200)
            #expect(status.json?["status"] as? String == "completed")
            #expect(status.json?["error"] is NSNull)
            #expect(ContinuousClock.now - started < .seconds(10), "the long-poll on B woke when B completed the flow")
            let again = try await Self.request(b, "GET", "/v1/flows/\(flowID)", token: token)
            #expect(again.json?["status"] as? String == "completed")

            let proxied = try await Self.request(b, "GET", "/v1/proxy/oauth-api/data", token: token)
            #expect(proxied.status == 200, "\(proxied.text)")
            #expect(proxied.json?["sub"] as? String == "alice")
            #expect(simulator.oauth.tokenCalls(grant: "authorization_code") == 1)
            #expect(!b.log.contains(token), "the client token was logged")
            await b.stop()
        }
    }

    // MARK: failover to a promoted standby

    /// Parley serves on a primary named first in a multi-host `PARLEY_DATABASE_URL`
    /// (`target_session_attrs=read-write`); the primary dies (`pg_ctl stop -m immediate`), the
    /// standby is promoted, and the same Parley process finds it: `503 store_unavailable` (never a
    /// `500`) in between, then the old registration (replicated) and new ones work.
    @Test func failoverToAPromotedStandbyWithoutRestartingParley() async throws {
        let primary = try await PostgresServer.start()
        var standby: PostgresServer?
        do {
            let replica = try await primary.startStandby()
            standby = replica
            try await withRunningSimulator(logger: quietLogger) { simulatorPort, _ in
                let database = PostgresServer.multiHostConnectionString([primary, replica])
                let destinations = try ServeTests.destinationsFile(simulatorPort: simulatorPort)
                defer { try? FileManager.default.removeItem(atPath: destinations) }
                let env = ServeTests.environment(database: database, destinations: destinations)
                let parley = try await ParleyProcess.start(environment: env)
                defer { Task { await parley.stop() } }

                let (_, before) = try await Self.register(parley)
                let served = try await Self.request(parley, "GET", "/v1/proxy/api/data", token: before)
                #expect(served.status == 200, "\(served.text)")
                try await replica.waitForReplay(of: primary)

                try await primary.stop(mode: .immediate)
                let primaryDied = ContinuousClock.now
                // The primary is gone and the standby refuses writes: unavailable, not an error.
                let down = try await Self.request(parley, "GET", "/v1/registrations/me", token: before)
                #expect(down.status == 503)
                #expect(down.json?["code"] as? String == "store_unavailable")
                #expect(down.header("Retry-After") != nil)
                let refusedWrite = try await Self.request(
                    parley, "POST", "/v1/registrations", json: #"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#)
                #expect(refusedWrite.status == 503, "\(refusedWrite.text)")
                #expect(refusedWrite.json?["code"] as? String == "store_unavailable")

                try await replica.promote()
                let promoted = ContinuousClock.now
                var unavailable = 0
                let back = try await Self.poll(within: .seconds(30), "Parley to use the promoted standby") { () -> RawHTTPResponse? in
                    let answer = try await Self.request(parley, "GET", "/v1/registrations/me", token: before)
                    if answer.status == 200 { return answer }
                    #expect(answer.status == 503, "\(answer.text)")
                    #expect(answer.json?["code"] as? String == "store_unavailable")
                    unavailable += 1
                    return nil
                }
                let recovery = ContinuousClock.now - promoted
                #expect(back.json?["status"] as? String == "active")

                // The registration made before the failover was replicated; new ones are written.
                #expect(try await Self.request(parley, "GET", "/v1/proxy/api/data", token: before).status == 200)
                let (_, after) = try await Self.register(parley)
                #expect(try await Self.request(parley, "GET", "/v1/proxy/api/data", token: after).status == 200)
                #expect(try await Self.request(parley, "GET", "/readyz").status == 200)
                #expect(try await replica.isInRecovery() == false)
                #expect(!parley.log.contains("http.status=500") && !parley.log.contains("internal_error"), "a 500 during the failover")
                // LISTEN/NOTIFY (cache invalidation, flow wake-ups) follows the failover too.
                try await parley.waitForOutput("notification listener reconnected", timeout: .seconds(10))
                print(
                    "[measured] failover: service back \(recovery) after pg_is_in_recovery() turned false, "
                        + "\(primaryDied.duration(to: promoted + recovery)) after the primary died; "
                        + "503 store_unavailable before the promotion (a read and a write), \(unavailable) answers 503 after it")
                await parley.stop()
            }
        } catch {
            try? await standby?.destroy()
            try? await primary.destroy()
            throw error
        }
        try await standby?.destroy()
        try await primary.destroy()
    }

    /// A switchover that leaves the old primary up but read-only (`default_transaction_read_only`):
    /// the pooled connection to it fails once with `.unavailable` (SQLSTATE 25006), is dropped
    /// instead of lent again, and the next connection skips the read-only host
    /// (`target_session_attrs=read-write`) for the writable one.
    @Test func aPooledConnectionToAServerTurnedReadOnlyIsDropped() async throws {
        let first = try await PostgresServer.start()
        var second: PostgresServer?
        do {
            let other = try await PostgresServer.start()
            second = other
            for server in [first, other] {
                _ = try await Self.withStore(server.connectionString) { try await $0.execute("CREATE TABLE fault_probe (n int)") }
            }
            try await Self.withStore(PostgresServer.multiHostConnectionString([first, other])) { pool in
                let write: SQL = "INSERT INTO fault_probe VALUES (1) RETURNING inet_server_port() AS port"
                #expect(try await pool.query(write).first?.int("port") == first.port)

                try await Self.withStore(first.connectionString) { admin in
                    try await admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
                    try await admin.execute("SELECT pg_reload_conf()")
                }
                // The pooled session sees the reload at one of its next statements.
                let refusal = try await Self.poll(within: .seconds(10), "the first server to turn read-only") { () -> StoreError? in
                    let port: Int?
                    do {
                        port = try await pool.query(write).first?.optionalInt("port")
                    } catch let error as StoreError {
                        return error
                    }
                    #expect(port == first.port)
                    return nil
                }
                #expect(refusal.code == .unavailable)
                #expect(refusal.sqlState == "25006")
                #expect(try await pool.query(write).first?.int("port") == other.port, "the pool kept the read-only connection")
                #expect(try await pool.query(write).first?.int("port") == other.port)
            }
        } catch {
            try? await second?.destroy()
            try? await first.destroy()
            throw error
        }
        try await second?.destroy()
        try await first.destroy()
    }

    // MARK: the authorization server down, then throttling

    /// An authorization-code token with a refresh token is stored; the access token expires while
    /// the authorization server refuses connections, then answers `503`, then `429` with
    /// `Retry-After`. Each call that needs the refresh answers `503` with `Retry-After`, the stored
    /// row (refresh token included) stays as it was, and once the server is healthy the next call
    /// after the back-off succeeds by itself.
    @Test func anAuthorizationServerOutageLosesNoTokenAndServiceResumes() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let simulatorURL = "http://127.0.0.1:\(simulatorPort)"
            // The token endpoint has a listener of its own, so that it can go away and come back.
            let authorizationServer = try DetachableAuthorizationServer(state: simulator)
            try await authorizationServer.start()
            let port = try FreePort.find()
            let destinations = try Self.destinationsFile(
                Self.authorizationCode(simulatorURL, tokenURL: "http://127.0.0.1:\(authorizationServer.port)"))
            defer { try? FileManager.default.removeItem(atPath: destinations) }
            var env = ServeTests.environment(database: database, destinations: destinations)
            env["PARLEY_PUBLIC_URL"] = "http://127.0.0.1:\(port)"
            let parley = try await ParleyProcess.start(environment: env, port: port)
            defer { Task { await parley.stop() } }
            let store = PostgresStore(configuration: StoreConfiguration(connectionString: database, maxConnections: 1), logger: quietLogger)

            do {
                // A token with a refresh token, by an authorization-code flow done without a browser.
                let created = try await Self.request(parley, "POST", "/v1/registrations", json: #"{"destination":"as"}"#)
                let token = try #require(created.json?["clientToken"] as? String)
                let flow = try await Self.request(parley, "POST", "/v1/flows", token: token, json: "{}")
                let flowURL = try #require(flow.json?["url"] as? String)
                let start = try await ConfirmationForm.confirm(port: parley.port, target: try Self.path(of: flowURL))
                let authorize = try #require(start.onward)
                let query = try #require(authorize.split(separator: "?", maxSplits: 1).last.map(String.init))
                let login = try await RawHTTP.request(
                    port: simulatorPort, method: "POST", target: "/oauth/authorize",
                    headers: [("Content-Type", "application/x-www-form-urlencoded")],
                    body: Array((query + "&username=alice&password=wonderland").utf8))
                let callback = try #require(login.header("Location"))
                #expect(try await Self.request(parley, "GET", try Self.path(of: callback)).status == 303)
                #expect(try await Self.request(parley, "GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
                let stored = try await Self.storedRefreshTokens(store)
                #expect(stored.count == 1)
                let original = try #require(stored.first)

                /// Calls until `phaseDone` holds (or the call succeeds, when `untilSuccess`): every
                /// refusal on the way must be a 503 with Retry-After, and the stored row must stay.
                func callThrough(
                    _ what: String, untilSuccess: Bool = false, within limit: Duration = .seconds(20),
                    _ phaseDone: @escaping @Sendable () -> Bool = { false }
                ) async throws -> [RawHTTPResponse] {
                    var refusals: [RawHTTPResponse] = []
                    _ = try await Self.poll(within: limit, what) { () -> Bool? in
                        let answer = try await Self.request(parley, "GET", "/v1/proxy/oauth-api/data", token: token)
                        if answer.status == 200 {
                            #expect(untilSuccess, "\(what): a call succeeded while the authorization server failed")
                            return true
                        }
                        #expect(answer.status == 503, "\(what): \(answer.status) \(answer.text)")
                        #expect(answer.json?["code"] as? String == "upstream_unavailable")
                        #expect(Int(answer.header("Retry-After") ?? "") ?? 0 >= 1, "\(what): no Retry-After")
                        refusals.append(answer)
                        #expect(try await Self.storedRefreshTokens(store) == [original], "\(what): the stored token changed")
                        return phaseDone() ? true : nil
                    }
                    return refusals
                }

                // 1. Connections refused.
                await authorizationServer.stop()
                simulator.oauth.expireAccessTokens()
                let refused = try await callThrough("connections refused") { true }
                #expect(refused.count == 1)

                // 2. Back, but answering 503.
                let calls = simulator.oauth.tokenCalls(grant: "refresh_token")
                simulator.oauth.failNextTokenCalls(count: 1, status: 503)
                try await authorizationServer.start()
                _ = try await callThrough("503 from the authorization server") {
                    simulator.oauth.tokenCalls(grant: "refresh_token") == calls + 1
                }

                // 3. Throttling: 429 with Retry-After, which Parley honours.
                simulator.oauth.failNextTokenCalls(count: 1, status: 429, retryAfter: 5, error: "slow_down")
                let throttled = try await callThrough("429 from the authorization server") {
                    simulator.oauth.tokenCalls(grant: "refresh_token") == calls + 2
                }
                #expect(Int(throttled.last?.header("Retry-After") ?? "") ?? 0 >= 5, "the authorization server's Retry-After was ignored")
                let throttledAt = ContinuousClock.now

                // 4. Healthy again: the first call after the back-off succeeds, by itself.
                _ = try await callThrough("service to resume", untilSuccess: true)
                #expect(ContinuousClock.now - throttledAt >= .seconds(4), "Parley asked again before the Retry-After ran out")
                #expect(simulator.oauth.tokenCalls(grant: "refresh_token") == calls + 3, "one refresh once the back-off ran out")
                #expect(simulator.oauth.tokenErrorsByCode["invalid_grant"] == nil)
                let after = try await Self.storedRefreshTokens(store)
                #expect(after.count == 1)
                #expect(after != [original], "the refresh token was rotated by the successful refresh")
                #expect(try await Self.request(parley, "GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
                #expect(!parley.log.contains("http.status=500"))
                print("[measured] authorization server outage: first success \(ContinuousClock.now - throttledAt) after the 429 with Retry-After: 5")
                await store.shutdown()
                await authorizationServer.stop()
                await parley.stop()
            } catch {
                await store.shutdown()
                await authorizationServer.stop()
                throw error
            }
        }
    }

    // MARK: helpers

    /// The public URL both instances of the kill test sit behind; the test routes by path.
    static let publicURL = "http://parley-lb.test"

    static func authorizationCode(_ simulatorURL: String, tokenURL: String) -> String {
        """
        destinations:
          - name: as
            url: \(simulatorURL)
            oauth2:
              grant: authorization_code
              authorizationEndpoint: \(simulatorURL)/oauth/authorize
              tokenEndpoint: \(tokenURL)/oauth/token
              clientId: parley-public
        """
    }

    /// Writes a destinations file; `parley serve` reads it once, at start.
    static func destinationsFile(_ yaml: String) throws -> String {
        try ScratchFile.write(yaml, suffix: ".yaml")
    }

    /// The path and query of an absolute URL (what a load balancer forwards).
    static func path(of url: String) throws -> String {
        guard let scheme = url.range(of: "://"),
            let slash = url[scheme.upperBound...].firstIndex(where: { $0 == "/" || $0 == "?" })
        else { throw RawHTTPError(description: "not an absolute URL with a path: \(url)") }
        let rest = String(url[slash...])
        return rest.hasPrefix("?") ? "/" + rest : rest
    }

    static func request(
        _ parley: ParleyProcess, _ method: String, _ target: String, token: String? = nil, json: String? = nil
    ) async throws -> RawHTTPResponse {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if json != nil { headers.append(("Content-Type", "application/json")) }
        return try await RawHTTP.request(
            port: parley.port, method: method, target: target, headers: headers, body: Array((json ?? "").utf8), timeout: 35)
    }

    static func register(_ parley: ParleyProcess) async throws -> (String, String) {
        let created = try await request(parley, "POST", "/v1/registrations", json: #"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#)
        guard created.status == 201, let id = created.json?["id"] as? String, let token = created.json?["clientToken"] as? String
        else { throw RawHTTPError(description: "registration failed: \(created.status) \(created.text)") }
        return (id, token)
    }

    /// The sealed refresh tokens stored, in a stable order.
    static func storedRefreshTokens(_ store: PostgresStore) async throws -> [[UInt8]] {
        try await store.query("SELECT refresh_token_sealed FROM tokens WHERE refresh_token_sealed IS NOT NULL ORDER BY id")
            .map { try $0.bytes("refresh_token_sealed") }
    }

    /// A pool on `connectionString` for `body`, shut down afterwards.
    static func withStore<T: Sendable>(_ connectionString: String, _ body: (PostgresStore) async throws -> T) async throws -> T {
        try await withPostgresStore(StoreConfiguration(connectionString: connectionString, maxConnections: 1), body)
    }

    /// Calls `attempt` every 50 ms until it returns a value, failing after `limit`.
    static func poll<T>(
        within limit: Duration, _ what: String, _ attempt: () async throws -> T?
    ) async throws -> T {
        let deadline = ContinuousClock.now + limit
        while true {
            if let value = try await attempt() { return value }
            guard ContinuousClock.now < deadline else { throw RawHTTPError(description: "timed out after \(limit) waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// The simulator's routes on a second, fixed port, sharing the simulator's state (tokens issued
/// here are valid at the simulator's resources): a destination whose token endpoint points here
/// sees its authorization server vanish (`stop()`: connections refused) and come back (`start()`).
final class DetachableAuthorizationServer: Sendable {
    let port: Int
    private let state: SimulatorState
    private let running = Mutex<Task<Void, any Error>?>(nil)

    init(state: SimulatorState) throws {
        self.port = try FreePort.find()
        self.state = state
    }

    /// Starts listening and returns once connections are accepted.
    func start() async throws {
        let app = buildSimulator(state: state, port: port, logger: quietLogger)
        let state = self.state
        let task = Task { try await runSimulator(app, state: state) }
        running.withLock { $0 = task }
        _ = try await FaultTests.poll(within: .seconds(10), "the authorization server to listen on \(port)") { () -> Bool? in
            (try? await RawHTTP.request(port: port, method: "GET", target: "/sim/stats", timeout: 2)) != nil ? true : nil
        }
    }

    /// Stops listening and returns once the port refuses connections.
    func stop() async {
        guard let task = running.withLock({ running in defer { running = nil }; return running }) else { return }
        task.cancel()
        _ = await task.result
    }
}
