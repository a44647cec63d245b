import Foundation
import ParleyTesting
import Testing
import UpstreamSimulator

/// The real `parley` binary against a real PostgreSQL: readiness, migrations,
/// graceful shutdown, store outages, configuration errors.
@Suite(.serialized) struct ServeTests {
    static let keys = "k1:" + Data(repeating: 9, count: 32).base64EncodedString()

    static func destinationsFile(simulatorPort: Int) throws -> String {
        try ScratchFile.write(
            """
            destinations:
              - name: sim
                url: http://127.0.0.1:\(simulatorPort)
                basic: {}
            """, suffix: ".yaml")
    }

    static func environment(database: String, destinations: String) -> [String: String] {
        [
            "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": keys, "PARLEY_DESTINATIONS": destinations,
            "PARLEY_LOG_LEVEL": "info",
        ]
    }

    @Test func readyOnlyAfterMigrationsAreApplied() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        var env = Self.environment(database: database, destinations: try Self.destinationsFile(simulatorPort: 1))
        env["PARLEY_MIGRATE_ON_START"] = "false"
        let parley = try await ParleyProcess.start(environment: env)
        defer { Task { await parley.stop() } }
        let before = try await RawHTTP.request(port: parley.port, method: "GET", target: "/readyz")
        #expect(before.status == 503)
        #expect(before.json?["code"] as? String == "store_unavailable")
        #expect(try await RawHTTP.request(port: parley.port, method: "GET", target: "/healthz").status == 200)

        let migrate = try await ParleyProcess.start(arguments: ["migrate"], environment: env, waitForReady: false)
        #expect(try await migrate.waitForExit() == 0)
        #expect(migrate.log.contains("migrations applied: 0001_initial.sql"))
        let again = try await ParleyProcess.start(arguments: ["migrate"], environment: env, waitForReady: false)
        #expect(try await again.waitForExit() == 0)
        #expect(again.log.contains("up to date"))

        #expect(try await RawHTTP.request(port: parley.port, method: "GET", target: "/readyz").status == 200)
        await parley.stop()
    }

    @Test func sigtermLetsInFlightRequestsFinish() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let env = Self.environment(database: database, destinations: try Self.destinationsFile(simulatorPort: simulatorPort))
            let parley = try await ParleyProcess.start(environment: env)
            let created = try await RawHTTP.request(
                port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
                body: Array(#"{"destination":"sim"}"#.utf8))
            let token = try #require(created.json?["clientToken"] as? String)
            async let slow = RawHTTP.request(
                port: parley.port, method: "GET", target: "/v1/proxy/slow?ms=1500", headers: [("Authorization", "Bearer \(token)")])
            await simulator.waitForRequests(route: "GET /slow", count: 1)
            parley.signal(SIGTERM)
            let response = try await slow
            #expect(response.status == 200)
            #expect(try await parley.waitForExit() == 0)
            #expect(!parley.log.contains(token), "the client token was logged")
        }
    }

    @Test func storeOutageAnswers503AndRecoversWithoutRestart() async throws {
        try await PostgresServer.withServer { postgres in
            let env = Self.environment(database: postgres.connectionString, destinations: try Self.destinationsFile(simulatorPort: 1))
            let parley = try await ParleyProcess.start(environment: env)
            defer { Task { await parley.stop() } }
            let created = try await RawHTTP.request(
                port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
                body: Array(#"{"destination":"sim"}"#.utf8))
            let token = try #require(created.json?["clientToken"] as? String)
            let auth = [("Authorization", "Bearer \(token)")]
            #expect(try await RawHTTP.request(port: parley.port, method: "GET", target: "/v1/registrations/me", headers: auth).status == 200)

            try await postgres.stop()
            let started = ContinuousClock.now
            let down = try await RawHTTP.request(port: parley.port, method: "GET", target: "/v1/registrations/me", headers: auth)
            #expect(ContinuousClock.now - started < .seconds(5), "fails fast")
            #expect(down.status == 503)
            #expect(down.json?["code"] as? String == "store_unavailable")
            #expect(down.header("Retry-After") != nil)
            #expect(try await RawHTTP.request(port: parley.port, method: "GET", target: "/readyz").status == 503)

            try await postgres.start()
            let up = try await RawHTTP.request(port: parley.port, method: "GET", target: "/v1/registrations/me", headers: auth)
            #expect(up.status == 200)
            #expect(try await RawHTTP.request(port: parley.port, method: "GET", target: "/readyz").status == 200)
            await parley.stop()
        }
    }

    /// The binary carries its migrations: copied alone into an empty directory (as a
    /// container image or `cp … /usr/local/bin` would), it migrates an empty database and serves.
    @Test func theBinaryRunsFromAnEmptyDirectory() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let empty = NSTemporaryDirectory() + "parley-alone-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: empty) }
        try FileManager.default.copyItem(atPath: ParleyProcess.binaryPath(), toPath: empty + "/parley")
        let destinations = try Self.destinationsFile(simulatorPort: 1)
        try FileManager.default.moveItem(atPath: destinations, toPath: empty + "/destinations.yaml")

        let env = Self.environment(database: database, destinations: "destinations.yaml")
        let parley = try await ParleyProcess.start(environment: env, binary: empty + "/parley", workingDirectory: empty)
        defer { Task { await parley.stop() } }
        let ready = try await RawHTTP.request(port: parley.port, method: "GET", target: "/readyz")
        #expect(ready.status == 200)
        #expect(parley.log.contains("applying migration"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty).sorted() == ["destinations.yaml", "parley"])
        await parley.stop()
    }

    /// `parley admin …` against a running binary: the admin API through libcurl.
    @Test func adminCommandsTalkToARunningInstance() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        var env = Self.environment(database: database, destinations: try Self.destinationsFile(simulatorPort: 1))
        env["PARLEY_ADMIN_TOKENS"] = "cli-admin-token-0123456789-0123456789abcdefghijk"
        let parley = try await ParleyProcess.start(environment: env)
        defer { Task { await parley.stop() } }
        let registered = try await RawHTTP.request(
            port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
            body: Array(#"{"destination":"sim","userHint":"cli-user"}"#.utf8))
        let id = try #require(registered.json?["id"] as? String)

        func admin(_ arguments: [String], token: String = "cli-admin-token-0123456789-0123456789abcdefghijk") async throws -> (Int32, String) {
            let run = try await ParleyProcess.start(
                arguments: ["admin"] + arguments + ["--url", "http://127.0.0.1:\(parley.port)"],
                environment: ["PARLEY_ADMIN_TOKEN": token], waitForReady: false)
            return (try await run.waitForExit(), run.log)
        }
        let (listed, listing) = try await admin(["registrations", "--user-hint", "cli-user"])
        #expect(listed == 0)
        #expect(listing.contains(id))
        let (shown, shownText) = try await admin(["show", id])
        #expect(shown == 0 && shownText.contains("\"tokens\""))
        let (revoked, revokedText) = try await admin(["revoke", "--registration-id", id])
        #expect(revoked == 0 && revokedText.contains("\"revoked\""))
        let (audited, auditText) = try await admin(["audit", "--limit", "5"])
        #expect(audited == 0 && auditText.contains("admin.revocation"))
        #expect(try await admin(["revoke"]).0 == 64, "a revocation without a filter is refused before any call")
        let (refused, refusedText) = try await admin(["registrations"], token: "wrong-admin-token-000000")
        #expect(refused == 1 && refusedText.contains("invalid_admin_token"))
        let (deleted, _) = try await admin(["delete", id])
        #expect(deleted == 0)
        #expect(try await admin(["show", id]).0 == 1)
        await parley.stop()
    }

    @Test func everyCommandExplainsItself() async throws {
        for arguments in [["--help"], ["serve", "--help"], ["migrate", "--help"], ["version", "--help"], ["admin", "--help"], ["admin", "revoke", "--help"], ["rekey", "--help"]] {
            let help = try await ParleyProcess.start(arguments: arguments, environment: [:], waitForReady: false)
            #expect(try await help.waitForExit() == 0, "parley \(arguments.joined(separator: " "))")
            #expect(help.log.contains("USAGE: parley"), "parley \(arguments.joined(separator: " "))")
        }
        let top = try await ParleyProcess.start(arguments: ["--help"], environment: [:], waitForReady: false)
        _ = try await top.waitForExit()
        for command in ["serve", "migrate", "admin", "rekey", "version"] { #expect(top.log.contains(command)) }
        let version = try await ParleyProcess.start(arguments: ["version"], environment: [:], waitForReady: false)
        #expect(try await version.waitForExit() == 0)
        #expect(version.log.contains("parley 0."))
        let unknown = try await ParleyProcess.start(arguments: ["frobnicate"], environment: [:], waitForReady: false)
        #expect(try await unknown.waitForExit() == 64)
    }

    @Test func configurationProblemsAreAllReportedAtStart() async throws {
        let parley = try await ParleyProcess.start(
            environment: ["PARLEY_ENCRYPTION_KEYS": "k1:tooshort,bad", "PARLEY_MAX_JSON_BYTES": "x"],
            waitForReady: false)
        #expect(try await parley.waitForExit() == 78)
        let log = parley.log
        #expect(log.contains("PARLEY_DATABASE_URL is not set"))
        #expect(log.contains("PARLEY_ENCRYPTION_KEYS"))
        #expect(log.contains("PARLEY_DESTINATIONS is not set"))
        #expect(log.contains("PARLEY_MAX_JSON_BYTES"))
        #expect(!log.contains("tooshort"), "key material is not echoed")
    }
}
