import Foundation
import ParleyTesting
import Testing

/// schemathesis (PyPI) against the real binary and PostgreSQL, for the thin-client and
/// administration APIs, with a bounded number of examples: no 5xx, every answer conforms
/// to docs/openapi.json, every error is problem+json.
@Suite(.serialized) struct SchemathesisTests {
    static let adminToken = "schemathesis-admin-token-0123456789abcdef0123456789"

    @Test func bothAPIsConformToTheirDocument() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        // A destination with the Basic form: a registration without credentials can start a
        // flow (`POST /v1/flows`), so the stateful phase follows startFlow → getFlow; its
        // upstream is never reached (port 1), nothing here needs it.
        let destinations = try ScratchFile.write(
            """
            destinations:
              - name: sim
                url: http://127.0.0.1:1
                basic: { form: true }
            """, suffix: ".yaml")
        var env = ServeTests.environment(database: database, destinations: destinations)
        env["PARLEY_ADMIN_TOKENS"] = Self.adminToken
        // The fuzzer registers far more often than a client address may.
        env["PARLEY_RATE_LIMIT_REGISTRATIONS"] = "off"
        let parley = try await ParleyProcess.start(environment: env)
        defer { Task { await parley.stop() } }
        let registered = try await RawHTTP.request(
            port: parley.port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
            body: Array(#"{"destination":"sim"}"#.utf8))
        let token = try #require(registered.json?["clientToken"] as? String)

        let output = NSTemporaryDirectory() + "parley-schemathesis-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let status = try Spawn.runAndWait(
            [
                "/bin/bash", packageRoot + "/scripts/schemathesis.sh", "http://127.0.0.1:\(parley.port)", token, Self.adminToken,
                "sim",
            ],
            output: output, directory: packageRoot)
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        print(text.split(separator: "\n").suffix(40).joined(separator: "\n"))
        #expect(status == 0, "schemathesis found problems:\n\(text.suffix(6000))")
        #expect(!parley.log.contains("Fatal error"), "the server crashed")
        await parley.stop()
    }
}
