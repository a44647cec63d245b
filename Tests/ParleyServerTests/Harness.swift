import AuthFlows
import Conversation
import CurlTransport
import Foundation
import Hummingbird
import Logging
import ParleyCrypto
import ParleyDomain
import ParleyServer
import ParleyTesting
import ServiceLifecycle
import Store
import Synchronization
import Testing
import UpstreamSimulator

let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let migrationsDirectory = packageRoot + "/migrations"
let quietLogger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

/// A running Parley (the real server object on a real port) with its own database
/// on the shared test PostgreSQL, and an in-process upstream simulator.
struct LiveParley: Sendable {
    var baseURL: String { "http://127.0.0.1:\(port)" }

    let port: Int
    let store: PostgresStore
    let simulatorPort: Int
    let simulator: SimulatorState
    let databaseURL: String
    let spoolDirectory: String
    /// Further instances on the same database (multi-instance tests).
    var others: [LiveParley]

    func request(
        _ method: String, _ target: String, token: String? = nil, headers: [(String, String)] = [], body: [UInt8] = []
    ) async throws -> RawHTTPResponse {
        var headers = headers
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        return try await RawHTTP.request(port: port, method: method, target: target, headers: headers, body: body)
    }

    func json(_ method: String, _ target: String, token: String? = nil, _ object: [String: Any]) async throws -> RawHTTPResponse {
        let body = try JSONSerialization.data(withJSONObject: object)
        return try await request(method, target, token: token, headers: [("Content-Type", "application/json")], body: Array(body))
    }

    /// Registers with `destination` and returns (id, clientToken).
    func register(_ destination: String = "sim", credentials: Bool = true, extra: [String: Any] = [:]) async throws -> (String, String) {
        var object: [String: Any] = ["destination": destination]
        if credentials { object["credentials"] = ["username": "alice", "password": "wonderland"] }
        for (k, v) in extra { object[k] = v }
        let response = try await json("POST", "/v1/registrations", object)
        guard response.status == 201, let json = response.json, let id = json["id"] as? String, let token = json["clientToken"] as? String
        else { throw RawHTTPError(description: "registration failed: \(response.status) \(response.text)") }
        return (id, token)
    }

    /// Row counts of every table that holds state, to prove bad input changed nothing.
    func stateCounts() async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for table in ["registrations", "tokens", "cookies", "flows"] {
            counts[table] = try await store.query(SQL(unsafeSQL: "SELECT count(*) AS n FROM \(table)"))[0].int("n")
        }
        return counts
    }
}

func testKeyRing() -> KeyRing {
    try! KeyRing(keys: [("test", [UInt8](repeating: 7, count: 32))])
}

/// How a live test wants its Parley.
struct LiveOptions: Sendable {
    var instances = 1
    var clock: any WallClock = SystemClock()
    var logs: LogCapture?
    /// Bind to a known port so `PARLEY_PUBLIC_URL` (flow URLs, `redirect_uri`) is right.
    var fixedPorts = false
    /// Bind the (single) instance to this port, known before the destinations are set up.
    var port: Int?
    var simulator = SimulatorConfiguration()
}

/// Starts simulator + Parley for `body`, then stops both.
func withLiveParley<T: Sendable>(
    destinations: @escaping @Sendable (_ simulatorURL: String) -> [DestinationSpec] = { [DestinationSpec(name: "sim", url: $0, basic: .init())] },
    options: LiveOptions = LiveOptions(),
    adjust: @Sendable (inout ParleyConfiguration) -> Void = { _ in },
    _ body: @Sendable (LiveParley) async throws -> T
) async throws -> T {
    try await withLiveParley(setUp: { port in destinations("http://127.0.0.1:\(port)") }, options: options, adjust: adjust, body)
}

/// As above, with an async set-up that sees the simulator's port (to put a TLS front before it, say).
func withLiveParley<T: Sendable>(
    setUp: @escaping @Sendable (_ simulatorPort: Int) async throws -> [DestinationSpec],
    options: LiveOptions = LiveOptions(),
    adjust: @Sendable (inout ParleyConfiguration) -> Void = { _ in },
    _ body: @Sendable (LiveParley) async throws -> T
) async throws -> T {
    let postgres = try await PostgresServer.shared()
    let databaseURL = try await postgres.createDatabase()
    let logger = options.logs?.logger() ?? quietLogger
    return try await withRunningSimulator(configuration: options.simulator, logger: quietLogger) { simulatorPort, simulatorState in
        let migrationStore = PostgresStore(configuration: StoreConfiguration(connectionString: databaseURL, maxConnections: 1), logger: quietLogger)
        _ = try await Migrator(store: migrationStore, source: .embedded(EmbeddedMigrations.files), logger: quietLogger).migrate()
        await migrationStore.shutdown()
        let spool = NSTemporaryDirectory() + "parley-spool-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let destinations = try await setUp(simulatorPort).map { try $0.validated() }
        func configuration(port: Int) throws -> ParleyConfiguration {
            var configuration = ParleyConfiguration(
                server: .init(port: port), database: .init(url: databaseURL),
                keys: .init(keyRing: testKeyRing(), adminTokens: ["admin-token-0123456789-0123456789abcdefghijk"]), destinations: destinations,
                bodies: .init(memoryBytes: 64 * 1024, spoolDirectory: spool))
            adjust(&configuration)
            return configuration
        }
        // One transport for every instance, as `adjust` sets it.
        let transport = CurlTransport(configuration: try configuration(port: 0).transport, logger: logger)
        defer { transport.shutdown() }

        var instances: [(PostgresStore, any ApplicationProtocol, AsyncStream<Int>)] = []
        for _ in 0..<options.instances {
            let port = try options.port ?? (options.fixedPorts ? FreePort.find() : 0)
            let configuration = try configuration(port: port)
            let store = PostgresStore(configuration: StoreConfiguration(connectionString: databaseURL, maxConnections: 8), logger: logger)
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let app = try buildApplication(
                configuration: configuration,
                dependencies: .postgres(configuration: configuration, store: store, transport: transport, clock: options.clock, logger: logger),
                logger: logger, onServerRunning: { port in continuation.yield(port) })
            instances.append((store, app, ports))
        }
        return try await withThrowingTaskGroup(of: T?.self) { group in
            var lives: [LiveParley] = []
            for (store, app, ports) in instances {
                group.addTask {
                    try await app.runService(gracefulShutdownSignals: [])
                    return nil
                }
                var iterator = ports.makeAsyncIterator()
                guard let port = await iterator.next() else { throw RawHTTPError(description: "parley did not start") }
                lives.append(
                    LiveParley(
                        port: port, store: store, simulatorPort: simulatorPort, simulator: simulatorState,
                        databaseURL: databaseURL, spoolDirectory: spool, others: []))
            }
            var live = lives[0]
            live.others = Array(lives.dropFirst())
            let result = try await body(live)
            group.cancelAll()
            while let _ = try? await group.next() {}
            return result
        }
    }
}
