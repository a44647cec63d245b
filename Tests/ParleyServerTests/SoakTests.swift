import Foundation
import ParleyTesting
import Testing

/// `make soak` (scripts/soak.sh) for two minutes, with the debug binaries: three instances behind
/// HAProxy (deploy/haproxy/parley.cfg), a real PostgreSQL restarted in the middle, at least one
/// instance killed with SIGKILL and restarted, 70 % of the measured maximum throughput over a mix
/// of Basic/cookie/CSRF, client-credentials and refreshed authorization-code calls. The script
/// judges itself (exit 0 only when every criterion holds); the test also reads its figures, so a
/// soak that quietly skipped its faults cannot pass.
@Suite(.serialized) struct SoakTests {
    static let script = packageRoot + "/scripts/soak.sh"

    @Test func twoMinutesWithKillsAndAPostgresRestart() async throws {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PARLEY_") && !$0.key.hasPrefix("SOAK_") }
        environment["PARLEY_BINARY"] = ParleyProcess.binaryPath()
        environment["PARLEY_SIMULATOR_BINARY"] = ParleyProcess.binaryPath("upstream-simulator", variable: "PARLEY_SIMULATOR_BINARY")
        environment["SOAK_SECONDS"] = "120"
        let scriptEnvironment = environment
        let (status, output) = try await runOnOwnThread { () -> (Int32, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
            // The paced phase is 120 s; set-up, the ramp and the checks take about a minute more.
            process.arguments = ["600", "/bin/bash", Self.script]
            process.environment = scriptEnvironment
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        let report = output.components(separatedBy: "================ Parley soak ================").last ?? output
        #expect(status == 0, "scripts/soak.sh exited \(status):\n\(output.suffix(6000))")
        #expect(output.contains("\nSOAK PASSED\n"), "\(output.suffix(3000))")

        let summary = try #require(output.split(separator: "\n").last { $0.hasPrefix("SOAK requests=") }, "no summary line:\n\(output.suffix(3000))")
        var figures: [String: Double] = [:]
        for field in summary.dropFirst("SOAK ".count).split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Double(parts[1]) { figures[String(parts[0])] = value }
        }
        #expect((figures["kills"] ?? 0) >= 1, "no instance was killed: \(summary)")
        #expect(figures["pg_restarts"] == 1, "PostgreSQL was not restarted once: \(summary)")
        #expect(figures["tokens_lost"] == 0, "\(summary)")
        #expect(figures["unexplained"] == 0, "\(summary)")
        #expect((figures["refreshes"] ?? 0) >= 1, "no token was refreshed: \(summary)")
        // 70 % of the maximum for 120 s: far more than a few requests.
        #expect((figures["requests"] ?? 0) >= 1000, "\(summary)")
        #expect((figures["target_rps"] ?? 0) > 0 && (figures["target_rps"] ?? 0) < (figures["max_rps"] ?? 0), "\(summary)")
        // The printed report names every instance's memory at its start and its end.
        for instance in ["parley1", "parley2", "parley3"] {
            #expect(report.contains("   \(instance) pid"), "no RSS line for \(instance):\n\(report)")
        }
        print("[measured] soak, 120 s:\n\(report)")
    }
}
