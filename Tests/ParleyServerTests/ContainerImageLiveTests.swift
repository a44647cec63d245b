import Foundation
import ParleyTesting
import Testing
import UpstreamSimulator

/// deploy/Containerfile's runtime stage built with podman and run for real (scripts/image-check.sh):
/// on a debootstrapped bookworm base standing in for `debian:bookworm-slim`, with the tests' build
/// of `parley` linked against the static Swift runtime standing in for the `build` stage. The
/// container runs read-only as the image's own user against the test PostgreSQL and an upstream
/// simulator, and answers a proxied call with the simulator's answer.
@Suite(.serialized) struct ContainerImageLiveTests {
    static let script = packageRoot + "/scripts/image-check.sh"

    static func podman(_ arguments: [String]) throws -> ToolResult { try Tool.run("podman", arguments) }

    @Test func theImageServesAProxiedCallReadOnlyAsItsOwnUser() async throws {
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let tag = "localhost/parley-check:\(suffix)"
        let name = "parley-check-\(suffix)"

        let built = try Tool.run(Self.script, ["build", tag])
        defer { _ = try? Self.podman(["rmi", "--force", tag]) }
        try #require(built.status == 0, "image build: \(built)")
        // What the Containerfile says, as the image carries it.
        let config = try Self.podman(["image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}", tag])
        #expect(config.output.trimmingCharacters(in: .whitespacesAndNewlines) == #"10001:10001 ["/usr/local/bin/parley"] ["serve"]"#, "\(config)")

        let postgres = try await PostgresServer.shared()
        // Inside the container the host's loopback is 10.0.2.2 (slirp4netns, scripts/image-check.sh run).
        let database = try await postgres.createDatabase().replacingOccurrences(of: "@127.0.0.1:", with: "@10.0.2.2:")
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let destinations = try ScratchFile.write(
                """
                destinations:
                  - name: sim
                    url: http://10.0.2.2:\(simulatorPort)
                    basic: {}
                """, suffix: ".yaml")
            let port = try FreePort.find()
            let started = try Tool.run(
                Self.script,
                [
                    "run", tag, "--name", name, "-p", "127.0.0.1:\(port):8080",
                    "-e", "PARLEY_DATABASE_URL", "-e", "PARLEY_ENCRYPTION_KEYS",
                    "-v", "\(destinations):/etc/parley/destinations.yaml:ro",
                ],
                environment: ["PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": ServeTests.keys])
            defer { _ = try? Self.podman(["rm", "--force", "--time", "0", name]) }
            try #require(started.status == 0, "podman run: \(started)")

            // Ready: migrations applied through the published port, within a minute.
            do {
                try await RegistrationAndProxyTests.poll("/readyz of the container", within: .seconds(60)) {
                    (try? await RawHTTP.request(port: port, method: "GET", target: "/readyz", timeout: 5))?.status == 200
                }
            } catch {
                let logs = try? Self.podman(["logs", name])
                Issue.record("not ready: \(error); container log: \(logs?.output.suffix(3000) ?? "none")")
                return
            }

            // A registration with the simulator's Basic credentials, and one proxied call it answers.
            let created = try await RawHTTP.request(
                port: port, method: "POST", target: "/v1/registrations", headers: [("Content-Type", "application/json")],
                body: Array(#"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#.utf8))
            #expect(created.status == 201, "\(created.text)")
            let token = try #require(created.json?["clientToken"] as? String, "\(created.text)")
            let before = simulator.requests(route: "GET /api/data")
            let data = try await RawHTTP.request(
                port: port, method: "GET", target: "/v1/proxy/api/data", headers: [("Authorization", "Bearer \(token)")])
            #expect(data.status == 200, "\(data.text)")
            #expect(data.json?["user"] as? String == "alice", "\(data.text)")
            #expect(data.json?["message"] as? String == "hello", "\(data.text)")
            #expect(simulator.requests(route: "GET /api/data") > before, "the answer did not come from the simulator")

            // Not root, a read-only root file system, a writable /tmp, no Swift library to load.
            let user = try Self.podman(["exec", name, "id", "-u"])
            #expect(user.output.trimmingCharacters(in: .whitespacesAndNewlines) == "10001", "\(user)")
            let rootWrite = try Self.podman(["exec", name, "touch", "/etc/parley/probe"])
            #expect(rootWrite.status != 0 && rootWrite.output.contains("Read-only file system"), "\(rootWrite)")
            let tmpWrite = try Self.podman(["exec", name, "touch", "/tmp/probe"])
            #expect(tmpWrite.status == 0, "\(tmpWrite)")
            let libraries = try Self.podman(["exec", name, "ldd", "/usr/local/bin/parley"])
            #expect(libraries.status == 0 && libraries.output.contains("libpq.so.5") && !libraries.output.contains("swift"), "\(libraries)")
            // The image's HEALTHCHECK, run inside the container.
            let health = try Self.podman(["healthcheck", "run", name])
            #expect(health.status == 0, "\(health)")

            // STOPSIGNAL SIGTERM: Parley drains and exits 0.
            let stopped = try Self.podman(["stop", "--time", "30", name])
            #expect(stopped.status == 0, "\(stopped)")
            let exit = try Self.podman(["inspect", "--format", "{{.State.ExitCode}}", name])
            #expect(exit.output.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(exit)")
        }
    }
}
