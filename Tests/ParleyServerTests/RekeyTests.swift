import Foundation
import Logging
import ParleyCrypto
import ParleyEncoding
import ParleyDomain
import ParleyServer
import ParleyTesting
import Store
import Synchronization
import Testing
import UpstreamSimulator

/// `parley rekey` with the real binary against a real PostgreSQL and the simulator:
/// k1 → k2 under load, then Parley with k2 alone; an interrupted run; values that do not open.
@Suite(.serialized) struct RekeyTests {
    static func key(_ id: String, _ byte: UInt8) -> String { id + ":" + Data(repeating: byte, count: 32).base64EncodedString() }
    static let k1 = key("k1", 1)
    static let k2 = key("k2", 2)
    static let k3 = key("k3", 3)
    static let password = "wonderland"

    static func destinationsFile(simulatorPort: Int) throws -> String {
        let sim = "http://127.0.0.1:\(simulatorPort)"
        func oauth2(_ name: String, grant: String, client: String, secret: String?) -> String {
            """
              - name: \(name)
                url: \(sim)
                oauth2:
                  grant: \(grant)
                  authorizationEndpoint: \(sim)/oauth/authorize
                  tokenEndpoint: \(sim)/oauth/token
                  clientId: \(client)
            \(secret.map { "      clientSecret: \($0)\n" } ?? "")      scopes: [read]

            """
        }
        return try ScratchFile.write(
            """
            destinations:
              - name: sim
                url: \(sim)
                smp: { appId: com.example.app }
                csrf: true
                basic: {}

            """
            + oauth2("as", grant: "password", client: "parley-confidential", secret: "s3cret")
            + oauth2("cc", grant: "client_credentials", client: "parley-confidential", secret: "s3cret")
            + oauth2("code", grant: "authorization_code", client: "parley-public", secret: nil),
            suffix: ".yaml")
    }

    static func environment(database: String, destinations: String, keys: String, port: Int) -> [String: String] {
        [
            "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": keys, "PARLEY_DESTINATIONS": destinations,
            "PARLEY_PUBLIC_URL": "http://127.0.0.1:\(port)", "PARLEY_LOG_LEVEL": "info",
            "PARLEY_RATE_LIMIT_REGISTRATIONS": "off", "PARLEY_RATE_LIMIT_PROXY": "off", "PARLEY_RATE_LIMIT_TOKEN_CALLS": "off",
        ]
    }

    /// `parley rekey <arguments>` to its end: exit status and everything it wrote.
    static func rekey(
        _ arguments: [String] = [], database: String, keys: String, timeout: Duration = .seconds(60)
    ) async throws -> (status: Int32, output: String) {
        let run = try await ParleyProcess.start(
            arguments: ["rekey"] + arguments, environment: ["PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": keys],
            waitForReady: false)
        let status = try await run.waitForExit(timeout: timeout)
        return (status, run.log)
    }

    /// Every sealed value's key id, counted per table, read here (not by the code under test).
    static func keyIDs(_ store: PostgresStore) async throws -> [String: [String: Int]] {
        var counts: [String: [String: Int]] = [:]
        for name in Rekey.knownColumns {
            let parts = name.split(separator: ".")
            let (table, column) = (String(parts[0]), String(parts[1]))
            for row in try await store.query(SQL(unsafeSQL: "SELECT \(column) AS v FROM \(table) WHERE \(column) IS NOT NULL")) {
                counts[table, default: [:]][KeyRing.keyID(of: try row.bytes("v")) ?? "?", default: 0] += 1
            }
        }
        return counts
    }

    static func request(
        _ port: Int, _ method: String, _ target: String, token: String? = nil, json: [String: Any]? = nil,
        form: String? = nil
    ) async throws -> RawHTTPResponse {
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if let json {
            headers.append(("Content-Type", "application/json"))
            body = Array(try JSONSerialization.data(withJSONObject: json))
        }
        if let form {
            headers.append(("Content-Type", "application/x-www-form-urlencoded"))
            body = Array(form.utf8)
        }
        return try await RawHTTP.request(port: port, method: method, target: target, headers: headers, body: body)
    }

    /// Registers and returns (id, clientToken).
    static func register(_ port: Int, _ destination: String, extra: [String: Any] = [:]) async throws -> (id: String, token: String) {
        var object: [String: Any] = ["destination": destination, "credentials": ["username": "alice", "password": password]]
        for (k, v) in extra { object[k] = v }
        let created = try await request(port, "POST", "/v1/registrations", json: object)
        guard created.status == 201, let id = created.json?["id"] as? String, let token = created.json?["clientToken"] as? String else {
            throw RawHTTPError(description: "registration at \(destination) failed: \(created.status) \(created.text)")
        }
        return (id, token)
    }

    /// The path and query of an absolute URL.
    static func target(of url: String) -> String {
        guard let scheme = url.range(of: "://"), let slash = url[scheme.upperBound...].firstIndex(of: "/") else { return url }
        return String(url[slash...])
    }

    // MARK: -

    /// What the load's clients share.
    final class LoadState: Sendable {
        let stop = Atomic<Bool>(false)
        let requests = Atomic<Int>(0)
        let failures = Mutex<[String]>([])
    }

    /// k1 → k2 while clients register and call (two rekeys at once), then Parley with k2 alone:
    /// every credential, certificate, APPCID, cookie, token and the pending flow still opens.
    @Test func rotatesUnderLoadThenTheOldKeyCanGo() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let store = PostgresStore(configuration: StoreConfiguration(connectionString: database, maxConnections: 2), logger: quietLogger)
        defer { Task { await store.shutdown() } }

        // Access tokens live 5 s, less than Parley's 30 s margin: every OAuth2 call refreshes,
        // so token rows are rewritten (and refresh tokens rotated) while rekey works on them.
        let simulatorConfiguration = SimulatorConfiguration(accessTokenLifetime: .seconds(5))
        try await withRunningSimulator(configuration: simulatorConfiguration, logger: quietLogger) { simulatorPort, simulator in
            let destinations = try Self.destinationsFile(simulatorPort: simulatorPort)
            defer { try? FileManager.default.removeItem(atPath: destinations) }
            let port = try FreePort.find()
            func env(_ keys: String) -> [String: String] {
                Self.environment(database: database, destinations: destinations, keys: keys, port: port)
            }

            // 1. Everything sealed under k1.
            var parley = try await ParleyProcess.start(environment: env(Self.k1), port: port)
            var smp: [(token: String, appcid: String)] = []
            for _ in 0..<10 {
                let (id, token) = try await Self.register(port, "sim")
                let me = try await Self.request(port, "GET", "/v1/registrations/me", token: token)
                let appcid = try #require(me.json?["appcid"] as? String, "\(id): \(me.text)")
                #expect(try await Self.request(port, "GET", "/v1/proxy/api/data", token: token).status == 200)
                smp.append((token, appcid))
            }
            let (_, certified) = try await Self.register(
                port, "sim",
                extra: ["clientCertificate": ["pkcs12": Base64.encode(certificates.clientPKCS12), "password": certificates.clientPKCS12Password]])
            #expect(try await Self.request(port, "GET", "/v1/proxy/api/data", token: certified).status == 200)
            var oauth: [String] = []
            for _ in 0..<6 {
                let (_, token) = try await Self.register(port, "as")
                #expect(try await Self.request(port, "GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
                oauth.append(token)
            }
            let (_, clientCredentials) = try await Self.register(port, "cc")
            #expect(try await Self.request(port, "GET", "/v1/proxy/oauth-api/data", token: clientCredentials).status == 200)
            // A pending authorization-code flow whose start page was opened (PKCE verifier sealed).
            let (_, coded) = try await Self.register(port, "code")
            let challenged = try await Self.request(port, "GET", "/v1/proxy/oauth-api/data", token: coded)
            #expect(challenged.status == 401)
            let flowURL = try #require(challenged.header("Parley-Flow"))
            let flowID = try #require((challenged.json?["flow"] as? [String: Any])?["id"] as? String)
            let started = try await ConfirmationForm.confirm(port: port, target: Self.target(of: flowURL))
            let authorize = try #require(started.onward, "\(started.status) \(started.text)")

            let before = try await Self.keyIDs(store)
            for table in ["registrations", "tokens", "cookies", "flows"] {
                #expect(before[table]?["k1", default: 0] ?? 0 > 0, "\(table) holds values sealed under k1: \(before)")
                #expect(before[table]?.keys.sorted() == ["k1"], "\(before)")
            }

            // 2. Every instance gets k2 first (one instance here), then rekey runs under load.
            await parley.stop()
            parley = try await ParleyProcess.start(environment: env(Self.k2 + "," + Self.k1), port: port)
            let state = LoadState()
            let smpTokens = Set(smp.map(\.token) + [certified])
            let everyone = smp.map(\.token) + oauth + [certified, clientCredentials]
            let load = Task {
                await withTaskGroup(of: Void.self) { group in
                    for client in 0..<4 {
                        group.addTask {
                            var i = client
                            while !state.stop.load(ordering: .relaxed) {
                                i += 4
                                do {
                                    if i % 7 == 0 {
                                        // New registrations (sealed under k2) with cookies and an APPCID.
                                        let (_, token) = try await Self.register(port, "sim")
                                        let r = try await Self.request(port, "GET", "/v1/proxy/api/data", token: token)
                                        if r.status != 200 { state.failures.withLock { $0.append("new: \(r.status) \(r.text)") } }
                                    } else {
                                        let token = everyone[i % everyone.count]
                                        let path = smpTokens.contains(token) ? "/v1/proxy/api/data" : "/v1/proxy/oauth-api/data"
                                        let r = try await Self.request(port, "GET", path, token: token)
                                        if r.status != 200 { state.failures.withLock { $0.append("\(path): \(r.status) \(r.text)") } }
                                    }
                                } catch {
                                    state.failures.withLock { $0.append("\(error)") }
                                }
                                state.requests.add(1, ordering: .relaxed)
                            }
                        }
                    }
                }
            }
            // The load is under way before rekey starts (bounded polling on a condition).
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .seconds(20))
            while state.requests.load(ordering: .relaxed) < 40 && clock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            let loadBefore = state.requests.load(ordering: .relaxed)
            // Two at once: the second starts once the first re-sealed its first row.
            let rotation = ["PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.k2 + "," + Self.k1]
            let first = try await ParleyProcess.start(arguments: ["rekey", "--batch-size", "1"], environment: rotation, waitForReady: false)
            try await first.waitForOutput("registrations 1/", timeout: .seconds(30))
            let second = try await ParleyProcess.start(arguments: ["rekey", "--batch-size", "2"], environment: rotation, waitForReady: false)
            var runs: [(status: Int32, output: String)] = []
            for run in [first, second] { runs.append((try await run.waitForExit(timeout: .seconds(60)), run.log)) }
            let loadDuring = state.requests.load(ordering: .relaxed) - loadBefore
            state.stop.store(true, ordering: .relaxed)
            await load.value
            for run in runs {
                #expect(run.status == 0, "\(run.output)")
                #expect(run.output.contains("to do: registrations "), "\(run.output)")
                #expect(run.output.contains("no longer in use: k1"), "\(run.output)")
                #expect(!run.output.contains(" k1 "), "no table still counts k1: \(run.output)")
                #expect(!run.output.contains(Self.password) && !run.output.contains(smp[0].appcid), "secrets stay out of the output")
            }
            #expect(loadDuring > 0, "requests ran while rekey did")
            #expect(state.failures.withLock { $0 }.isEmpty, "\(state.failures.withLock { $0.prefix(5) })")
            #expect(simulator.oauth.tokenErrorsByCode["invalid_grant"] == nil, "no refresh token was overwritten with a stale one")
            let after = try await Self.keyIDs(store)
            for table in ["registrations", "tokens", "cookies", "flows"] {
                #expect(after[table]?.keys.sorted() == ["k2"], "\(table): \(after)")
            }

            // 3. k1 is removed: Parley with k2 alone opens everything written before.
            await parley.stop()
            parley = try await ParleyProcess.start(environment: env(Self.k2), port: port)
            defer { Task { [parley] in await parley.stop() } }
            let passwordGrants = simulator.oauth.tokenCalls(grant: "password")
            let refreshes = simulator.oauth.tokenCalls(grant: "refresh_token")
            let clientCredentialGrants = simulator.oauth.tokenCalls(grant: "client_credentials")
            for (token, appcid) in smp {
                #expect(try await Self.request(port, "GET", "/v1/proxy/api/data", token: token).status == 200)
                let echoed = try await Self.request(port, "GET", "/v1/proxy/api/appcid", token: token)
                #expect(echoed.json?["appcid"] as? String == appcid, "the APPCID opens: \(echoed.text)")
            }
            #expect(try await Self.request(port, "GET", "/v1/proxy/api/data", token: certified).status == 200)
            for token in oauth + [clientCredentials] {
                #expect(try await Self.request(port, "GET", "/v1/proxy/oauth-api/data", token: token).status == 200)
            }
            // Each of those calls opened the stored tokens and refreshed with the refresh token
            // (a refresh token that did not open would have meant a new password grant).
            #expect(simulator.oauth.tokenCalls(grant: "refresh_token") == refreshes + oauth.count)
            #expect(simulator.oauth.tokenCalls(grant: "password") == passwordGrants)
            #expect(simulator.oauth.tokenCalls(grant: "client_credentials") == clientCredentialGrants + 1)
            #expect(simulator.oauth.tokenErrorsByCode["invalid_grant"] == nil)

            // The pending flow: its URL secret opens, and its PKCE verifier finishes the sign-in.
            let flow = try await Self.request(port, "GET", "/v1/flows/\(flowID)", token: coded)
            #expect(flow.status == 200)
            #expect(flow.json?["url"] as? String == flowURL)
            let query = String(authorize[(authorize.firstIndex(of: "?").map { authorize.index(after: $0) } ?? authorize.endIndex)...])
            let signedIn = try await Self.request(
                simulatorPort, "POST", "/oauth/authorize", form: query + "&username=alice&password=\(Self.password)")
            let callback = try #require(signedIn.header("Location"))
            let finished = try await Self.request(port, "GET", Self.target(of: callback))
            #expect(finished.status == 303, "\(finished.text)")
            #expect(try await Self.request(port, "GET", "/v1/proxy/oauth-api/data", token: coded).status == 200)

            // 4. Nothing left to do.
            let again = try await Self.rekey(database: database, keys: Self.k2)
            #expect(again.status == 0, "\(again.output)")
            #expect(again.output.contains("to do: registrations 0, tokens 0, cookies 0, flows 0"), "\(again.output)")
            await parley.stop()
        }
    }

    /// A run stopped after a few batches, and one killed mid-way, are continued by the next;
    /// values that do not open are named (table, row, column) and the rest is still re-sealed.
    @Test func interruptedRunsContinueAndUnopenableValuesAreNamed() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let store = PostgresStore(configuration: StoreConfiguration(connectionString: database, maxConnections: 2), logger: quietLogger)
        defer { Task { await store.shutdown() } }
        let rings = (old: Self.k2 + "," + Self.k1, new: Self.k3 + "," + Self.k2)

        try await withRunningSimulator(logger: quietLogger) { simulatorPort, _ in
            let destinations = try Self.destinationsFile(simulatorPort: simulatorPort)
            defer { try? FileManager.default.removeItem(atPath: destinations) }
            let port = try FreePort.find()
            let parley = try await ParleyProcess.start(
                environment: Self.environment(database: database, destinations: destinations, keys: Self.k1, port: port), port: port)
            var ids: [String] = []
            for _ in 0..<6 {
                let (id, token) = try await Self.register(port, "sim")
                #expect(try await Self.request(port, "GET", "/v1/proxy/api/data", token: token).status == 200)
                ids.append(id)
            }
            await parley.stop()

            // Every sealed column of the schema is one rekey knows.
            let schema = try await Rekey(store: store, keyRing: try KeyRing.parse(Self.k1)).sealedColumnsInSchema()
            #expect(Set(schema.map { $0.table + "." + $0.column }) == Rekey.knownColumns)

            // A writer holds one row (its transaction is open) while rekey runs: rekey neither waits
            // for it nor overwrites what it wrote. Three batches of two, then rekey stops (--max-batches).
            let written = try KeyRing.parse(Self.k2).seal(
                #"{"username":"alice","password":"changed"}"#, associatedData: "registrations.credentials:" + ids[5])
            let stopped = try await store.withTransaction { writer in
                try await writer.execute("UPDATE registrations SET credentials_sealed = \(written) WHERE id = \(UUID(uuidString: ids[5]))::uuid")
                return try await Self.rekey(
                    ["--batch-size", "2", "--max-batches", "3"], database: database, keys: rings.old, timeout: .seconds(20))
            }
            #expect(stopped.status == 0, "\(stopped.output)")
            #expect(stopped.output.contains("to do: registrations 6,"), "\(stopped.output)")
            #expect(stopped.output.contains("resealed: registrations 5/6,"), "\(stopped.output)")
            #expect(stopped.output.contains("--max-batches"))
            #expect(stopped.output.contains("still in use besides 'k2': k1"), "\(stopped.output)")
            let heldRow = try await store.query("SELECT credentials_sealed FROM registrations WHERE id = \(UUID(uuidString: ids[5]))::uuid")
            #expect(try heldRow.first?.bytes("credentials_sealed") == written, "the writer's value stands")
            #expect(try await Self.keyIDs(store)["registrations"] == ["k1": 1, "k2": 11], "the held row's APPCID is left to do")

            // Killed after its first batch: the next run continues from what is left.
            let killed = try await ParleyProcess.start(
                arguments: ["rekey", "--batch-size", "1"], environment: ["PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": rings.old],
                waitForReady: false)
            try await killed.waitForOutput("cookies 1/12", timeout: .seconds(30))
            killed.signal(SIGKILL)
            _ = try await killed.waitForExit()

            let resumed = try await Self.rekey(["--batch-size", "2"], database: database, keys: rings.old)
            #expect(resumed.status == 0, "\(resumed.output)")
            #expect(resumed.output.contains("no longer in use: k1"), "\(resumed.output)")
            let k2Only = try await Self.keyIDs(store)
            #expect(k2Only.values.allSatisfy { $0.keys.sorted() == ["k2"] }, "\(k2Only)")
            let untouched = try await store.query("SELECT credentials_sealed FROM registrations WHERE id = \(UUID(uuidString: ids[5]))::uuid")
            #expect(try untouched.first?.bytes("credentials_sealed") == written, "a value already under k2 is left as it is")

            // One value sealed under a key nobody has, one copied from another row (bound to it).
            let foreign = try KeyRing(keys: [("k0", [UInt8](repeating: 0, count: 32))]).seal("x", associatedData: "registrations.credentials:" + ids[0])
            try await store.execute("UPDATE registrations SET credentials_sealed = \(foreign) WHERE id = \(UUID(uuidString: ids[0]))::uuid")
            try await store.execute(
                """
                UPDATE registrations SET credentials_sealed = (SELECT credentials_sealed FROM registrations WHERE id = \(UUID(uuidString: ids[2]))::uuid)
                WHERE id = \(UUID(uuidString: ids[1]))::uuid
                """)
            let partial = try await Self.rekey(["--batch-size", "4"], database: database, keys: rings.new)
            #expect(partial.status == 1, "\(partial.output)")
            #expect(partial.output.contains("cannot open: registrations id=\(ids[0]) credentials_sealed: sealed with key 'k0'"), "\(partial.output)")
            #expect(partial.output.contains("cannot open: registrations id=\(ids[1]) credentials_sealed: sealed value did not authenticate"))
            #expect(partial.output.contains("  registrations k0 1"), "\(partial.output)")
            #expect(partial.output.contains("  registrations k2 1"), "\(partial.output)")
            #expect(partial.output.contains("  registrations k3 10"), "\(partial.output)")
            #expect(partial.output.contains("still in use besides 'k3': k2"))
            #expect(partial.output.contains("in use but not in the key ring: k0"))
            #expect(!partial.output.contains(Self.password))
            let rest = try await Self.keyIDs(store)
            #expect(rest["cookies"]?.keys.sorted() == ["k3"], "the rest was re-sealed: \(rest)")
        }
    }
}
