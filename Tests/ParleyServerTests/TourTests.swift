import Foundation
import ParleyTesting
import Testing

/// `make tour` (scripts/tour.sh, scripts/tour.py) against the test binaries: the demo's whole
/// walk-through in headless Chromium, axe-core on every kind of Parley's hosted page in light and
/// dark (a violation of impact serious or critical fails the tour), nothing wider than 320 px,
/// and the screenshots of every page kind, phone and desktop, light and dark, into docs/screenshots.
@Suite(.serialized) struct TourTests {
    static let pageKinds = ["confirmation", "basic-form", "basic-form-error", "signed-in", "failed", "invalid-link", "web-refused"]
    static let schemes = ["light", "dark"]
    static let screenshots = packageRoot + "/docs/screenshots"

    @Test func theWholeWalkThroughPassesInChromiumWithNoSeriousAccessibilityViolation() async throws {
        let directory = NSTemporaryDirectory() + "parley-tour-" + UUID().uuidString
        let log = NSTemporaryDirectory() + "parley-tour-" + UUID().uuidString + ".log"
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            try? FileManager.default.removeItem(atPath: log)
        }
        // perl clears the blocked signals this process's children inherit (bash's traps and
        // `wait` need SIGCHLD and SIGUSR1), as DemoScriptTests explains.
        let clean = #"use POSIX; sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die; $SIG{$_} = "DEFAULT" for qw(TERM INT CHLD USR1 HUP); exec @ARGV or die"#
        let argv = [
            "/usr/bin/env", "-u", "PARLEY_LISTEN", "-u", "PARLEY_DEMO_SIMULATOR_PORT", "-u", "PARLEY_DEMO_TLS_PORT",
            "-u", "PARLEY_DEMO_PG_PORT",
            "PARLEY_BINARY=" + ParleyProcess.binaryPath(),
            "PARLEY_SIMULATOR_BINARY=" + ParleyProcess.binaryPath("upstream-simulator", variable: "PARLEY_SIMULATOR_BINARY"),
            "/usr/bin/timeout", "900", "/usr/bin/perl", "-e", clean,
            "/bin/bash", packageRoot + "/scripts/tour.sh", "--screenshots", Self.screenshots, "--demo-dir", directory,
        ]
        let status = try await runOnOwnThread { try Spawn.runAndWait(argv, output: log, directory: packageRoot) }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "the tour failed (exit \(status)):\n\(output.suffix(8000))")
        // What axe found on each page kind and scheme, and the tour's summary, for the test log.
        for line in output.split(separator: "\n") where line.contains(" axe ") || line.hasPrefix("tour") {
            print("[measured] \(line)")
        }

        // Every page kind checked in both schemes, each with no serious or critical violation.
        let checkedLine = output.split(separator: "\n").first { $0.hasPrefix("tour checked: ") }
        let checked = Set((checkedLine ?? "").dropFirst("tour checked: ".count).split(separator: " ").map(String.init))
        let expected = Set(Self.pageKinds.flatMap { kind in Self.schemes.map { "\(kind)/\($0)" } })
        #expect(checked == expected, "checked: \(checked.sorted()); missing: \(expected.subtracting(checked).sorted())")
        for kind in Self.pageKinds {
            for scheme in Self.schemes {
                #expect(output.contains("ok   axe \(kind) \(scheme) → 0 serious/critical"), "axe \(kind) \(scheme)")
                for width in ["phone", "desktop"] {
                    let path = "\(Self.screenshots)/\(kind)-\(width)-\(scheme).png"
                    #expect(FileManager.default.fileExists(atPath: path), "no \(path)")
                }
            }
        }
        // axe itself is live: the control page's missing alt text is reported.
        #expect(output.contains("ok   axe on a control page"), "\(output.suffix(4000))")
        #expect(output.contains(#"ok   the confirmation page with Accept-Language: de → <html lang="de">"#))
        #expect(FileManager.default.fileExists(atPath: Self.screenshots + "/confirmation-phone-light-de.png"))
        #expect(output.contains("steps, 0 failed"), "\(output.suffix(4000))")
        // The demo's processes and its PostgreSQL are gone.
        #expect(output.contains("ok   stop the demo (SIGTERM)"))
    }
}
