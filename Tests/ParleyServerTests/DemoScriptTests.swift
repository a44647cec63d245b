import Foundation
import ParleyTesting
import Testing

/// `make run` (scripts/run.sh) as a newcomer sees it: the real script with the real binaries
/// (`PARLEY_BINARY`, `PARLEY_SIMULATOR_BINARY`, so it does not build), its own PostgreSQL and
/// demo folder on free ports. The walk-through it prints is run as printed: every block's curl
/// lines in bash, and the interactive flows completed in headless Chromium on the simulator's
/// pages, so neither the demo nor its instructions can rot. The walk-through's administration
/// (`parley admin`) and key rotation (`parley rekey`, with Parley restarted by SIGUSR1) run too.
@Suite(.serialized) struct DemoScriptTests {
    static let script = packageRoot + "/scripts/run.sh"
    static let destinations = [
        "demo", "demo-client", "demo-oauth", "demo-saml", "demo-otp", "demo-form", "demo-password", "demo-cert",
    ]

    /// The script's environment: only what a newcomer would have, plus the binaries and ports.
    static func environment(directory: String, simulatorPort: Int, postgresPort: Int, tlsPort: Int) -> [String: String] {
        [
            "PARLEY_BINARY": ParleyProcess.binaryPath(),
            "PARLEY_SIMULATOR_BINARY": ParleyProcess.binaryPath("upstream-simulator", variable: "PARLEY_SIMULATOR_BINARY"),
            "PARLEY_DEMO_DIR": directory,
            "PARLEY_DEMO_SIMULATOR_PORT": String(simulatorPort),
            "PARLEY_DEMO_PG_PORT": String(postgresPort),
            "PARLEY_DEMO_TLS_PORT": String(tlsPort),
            "HOME": ProcessInfo.processInfo.environment["HOME"] ?? "/root",
        ]
    }

    /// One block of the walk-through: `name: what it shows`, then indented lines.
    struct Block {
        let name: String
        let commands: [String]
        var register: String? { commands.first { $0.hasPrefix("T=$(") } }
        var calls: [String] { commands.filter { $0.hasPrefix("curl ") } }
    }

    /// The blocks between the two rules of the walk-through.
    static func blocks(of output: String) throws -> [Block] {
        let parts = output.components(separatedBy: "──────────")
        let walkThrough = parts.dropFirst().first { $0.contains("Parley is ready") }
        let text = try #require(walkThrough, "no walk-through in:\n\(output)")
        return text.components(separatedBy: "\n\n").compactMap { paragraph -> Block? in
            let lines = paragraph.split(separator: "\n").map(String.init)
            guard let head = lines.first, let colon = head.firstIndex(of: ":"), head.hasPrefix("demo") else { return nil }
            let commands = lines.dropFirst().map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.hasPrefix("#") }
            return Block(name: String(head[..<colon]), commands: commands)
        }
    }

    /// The commands of the walk-through's paragraph that starts with `head` (its indented lines).
    static func paragraph(_ head: String, of output: String) throws -> [String] {
        let walkThrough = try #require(output.components(separatedBy: "──────────").dropFirst().first { $0.contains("Parley is ready") })
        let text = try #require(walkThrough.components(separatedBy: "\n\n").first { $0.hasPrefix(head) }, "no '\(head)' paragraph")
        return text.split(separator: "\n").filter { $0.hasPrefix("  ") }.map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.hasPrefix("#") }
    }

    /// Runs `script` in bash (at most `seconds`) and returns its standard output.
    static func shell(_ script: String, seconds: Int = 30) async throws -> String {
        try await runOnOwnThread {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
            process.arguments = [String(seconds), "/bin/bash", "-c", script]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// A printed call with the block's client token in `T`, as JSON.
    static func call(_ line: String, token: String) async throws -> [String: Any] {
        let text = try await shell("T='\(token)'\n" + line)
        let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        return try #require(json, "\(line)\n answered: \(text)")
    }

    /// The flow URL of a printed call's `401 interaction_required` answer.
    static func flowURL(_ answer: [String: Any], kind: String) throws -> String {
        #expect(answer["code"] as? String == "interaction_required", "\(answer)")
        let flow = try #require(answer["flow"] as? [String: Any], "\(answer)")
        #expect(flow["kind"] as? String == kind)
        return try #require(flow["url"] as? String)
    }

    static func signIn(_ browser: WebDriverSession) async throws {
        try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
        try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
        try await browser.click(try await browser.findElement(css: "#login"))
    }

    /// Waits for the flow's done page and checks it says the flow completed.
    static func expectSignedIn(_ browser: WebDriverSession, flowURL: String) async throws {
        let done = String(flowURL.prefix { $0 != "?" }) + "/done"
        _ = try await browser.waitForURL(prefix: done, timeout: .seconds(20))
        let page = try await browser.pageSource()
        #expect(page.contains("data-parley-flow-status=\"completed\"") && page.contains("Signed in"), "\(page.prefix(600))")
    }

    /// Starts the script as a terminal would: no signal blocked, TERM, INT and CHLD at their
    /// defaults (and USR1, which restarts Parley). Foundation's child inherits this test process's blocked signals (SIGCHLD among
    /// them), and bash's `wait` and traps then never wake; perl (perl-base, always on Debian)
    /// clears them before it becomes bash. The child leads its process group, and the script's
    /// background jobs stay in that group.
    static func start(environment: [String: String], port: Int? = nil) async throws -> ParleyProcess {
        let clean = #"use POSIX; sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die; $SIG{$_} = "DEFAULT" for qw(TERM INT CHLD USR1); exec @ARGV or die"#
        return try await ParleyProcess.start(
            arguments: ["-e", clean, "/bin/bash", script], environment: environment, port: port,
            waitForReady: false, binary: "/usr/bin/perl", workingDirectory: packageRoot)
    }

    /// Stops the script with SIGTERM, as a terminal's Ctrl-C would, and checks that it stopped
    /// Parley, the simulator and its PostgreSQL; then removes what is left.
    static func stop(_ demo: ParleyProcess, directory: String) async {
        await demo.stop()
        let group = demo.process.processIdentifier
        #expect(kill(-group, 0) != 0, "the demo left a process of its group running")
        kill(-group, SIGKILL)
        let log = demo.log
        if let range = log.range(of: "creating a local PostgreSQL in ") {
            let data = String(log[range.upperBound...].prefix { $0 != "\n" })
            if FileManager.default.fileExists(atPath: data + "/postmaster.pid") {
                Issue.record("the demo left its PostgreSQL running")
                let pgCtl = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?.sorted().last
                    .map { "/usr/lib/postgresql/\($0)/bin/pg_ctl" } ?? "pg_ctl"
                let asPostgres = getuid() == 0 ? ["runuser", "-u", "postgres", "--"] : []
                _ = try? Spawn.runAndWait(["/usr/bin/env"] + asPostgres + [pgCtl, "-D", data, "-m", "immediate", "stop"], output: nil)
            }
            if data.hasPrefix("/var/tmp/parley-demo-") {
                try? FileManager.default.removeItem(atPath: (data as NSString).deletingLastPathComponent)
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    @Test func everyDestinationWorksAsTheWalkThroughSays() async throws {
        let directory = NSTemporaryDirectory() + "parley-demo-" + UUID().uuidString
        let simulatorPort = try FreePort.find()
        var postgresPort = try FreePort.find()
        while postgresPort == simulatorPort { postgresPort = try FreePort.find() }
        var tlsPort = try FreePort.find()
        while tlsPort == simulatorPort || tlsPort == postgresPort { tlsPort = try FreePort.find() }
        let environment = Self.environment(
            directory: directory, simulatorPort: simulatorPort, postgresPort: postgresPort, tlsPort: tlsPort)
        let demo = try await Self.start(environment: environment)
        do {
            try await demo.waitForOutput("Parley's log follows.", timeout: .seconds(120))
            try await exercise(demo, simulatorPort: simulatorPort, tlsPort: tlsPort, directory: directory)
        } catch {
            await Self.stop(demo, directory: directory)
            throw error
        }
        await Self.stop(demo, directory: directory)
    }

    private func exercise(_ demo: ParleyProcess, simulatorPort: Int, tlsPort: Int, directory: String) async throws {
        let output = demo.log
        let base = "http://127.0.0.1:\(demo.port)"
        let simulator = "http://127.0.0.1:\(simulatorPort)"
        let blocks = try Self.blocks(of: output)

        // One block per destination of the demo's file, with the real ports.
        #expect(blocks.map(\.name) == Self.destinations)
        let file = try String(contentsOfFile: directory + "/destinations.yaml", encoding: .utf8)
        let destinationsPart = file.components(separatedBy: "\ndestinations:\n").dropFirst().first ?? ""
        let configured = destinationsPart.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("- name: ") ? String(trimmed.dropFirst("- name: ".count)) : nil
        }
        #expect(configured == Self.destinations)
        #expect(output.contains(base + "/v1/registrations") && output.contains(simulator + "/control/otp/code"))
        #expect(
            !output.contains(":8080") && !output.contains(":8081") && !output.contains(":8443"),
            "the walk-through names a default port")

        var tokens: [String: String] = [:]
        for block in blocks {
            let register = try #require(block.register, "\(block.name) has no registration line")
            let token = try await Self.shell(register + "\nprintf %s \"$T\"")
            #expect(token.hasPrefix("pct_"), "\(block.name): \(register) gave no client token")
            tokens[block.name] = token
            #expect(!block.calls.isEmpty, "\(block.name) has no call")
        }
        func block(_ name: String) throws -> (Block, String) {
            let found = blocks.first { $0.name == name }
            return (try #require(found), try #require(tokens[name]))
        }

        // Non-interactive: the calls answer at once.
        let (basic, basicToken) = try block("demo")
        let data = try await Self.call(basic.calls[0], token: basicToken)
        #expect(data["user"] as? String == "alice" && data["message"] as? String == "hello", "\(data)")
        let posted = try await Self.call(try #require(basic.calls.dropFirst().first), token: basicToken)
        #expect(posted["sha256"] is String, "CSRF-protected POST: \(posted)")

        let (client, clientToken) = try block("demo-client")
        let hello = try await Self.call(client.calls[0], token: clientToken)
        #expect(hello["message"] as? String == "hello oauth" && hello["sub"] as? String == "parley-confidential", "\(hello)")

        // The password grant: the token Parley got with the registration's credentials is alice's.
        let (password, passwordToken) = try block("demo-password")
        let granted = try await Self.call(password.calls[0], token: passwordToken)
        #expect(granted["message"] as? String == "hello oauth" && granted["sub"] as? String == "alice", "\(granted)")

        // The client certificate: through Parley, nginx in front of the simulator lets the call
        // pass with the certificate it verified (the simulator's echo shows nginx's headers);
        // without a certificate, as the block's last line shows, nginx closes the connection
        // unanswered (curl error 52).
        let (certificate, certificateToken) = try block("demo-cert")
        let echoed = try await Self.call(certificate.calls[0], token: certificateToken)
        let headers = echoed["headers"] as? [String: Any]
        #expect(
            headers?["x-client-verify"] as? [String] == ["SUCCESS"]
                && headers?["x-client-subject"] as? [String] == ["CN=parley-demo-client"],
            "\(echoed)")
        let direct = try #require(certificate.calls.dropFirst().first, "demo-cert has no call without a certificate")
        #expect(direct.contains("https://127.0.0.1:\(tlsPort)/"), "\(direct)")
        let refused = try await Self.shell(direct + "\necho \"exit $?\"")
        #expect(refused == "exit 52\n", "without a certificate: \(refused)")

        // A verified user, as the walk-through's paragraph shows it: a token the simulator's demo
        // identity provider mints, listed in the demo's destinations file.
        let walkThrough = try #require(output.components(separatedBy: "──────────").dropFirst().first { $0.contains("Parley is ready") })
        let verified = try #require(walkThrough.components(separatedBy: "\n\n").first { $0.hasPrefix("Verified users:") })
        let commands = verified.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.hasPrefix("#") }.dropFirst(2)
        #expect(commands.count == 3, "\(verified)")
        let me = try await Self.shell(commands.joined(separator: "\n"))
        #expect(me.contains(#""user":{"issuer":"\#(simulator)","subject":"alice","verified":true}"#), "\(me)")

        // Interactive: 401 with a flow URL, completed in a browser on the pages the walk-through names.
        let (oauth, oauthToken) = try block("demo-oauth")
        let oauthFlow = try Self.flowURL(try await Self.call(oauth.calls[0], token: oauthToken), kind: "oauth2")
        let (saml, samlToken) = try block("demo-saml")
        let samlFlow = try Self.flowURL(try await Self.call(saml.calls[0], token: samlToken), kind: "saml2")
        let (otp, otpToken) = try block("demo-otp")
        let otpFlow = try Self.flowURL(try await Self.call(otp.calls[0], token: otpToken), kind: "otp")
        let codeLine = try #require(otp.calls.first { $0.contains("/control/otp/code") })
        let (form, formToken) = try block("demo-form")
        let formFlow = try Self.flowURL(try await Self.call(form.calls[0], token: formToken), kind: "basic")

        try await ChromeDriver.withSession { browser in
            try await browser.openFlow(oauthFlow)
            _ = try await browser.waitForURL(prefix: simulator + "/oauth/authorize")
            let login = try await browser.pageSource()
            #expect(login.contains("demo-hint") && login.contains("alice") && login.contains("wonderland"), "\(login.prefix(800))")
            try await Self.signIn(browser)
            try await Self.expectSignedIn(browser, flowURL: oauthFlow)

            try await browser.openFlow(samlFlow)
            _ = try await browser.waitForURL(prefix: simulator + "/idp/")
            let idp = try await browser.pageSource()
            #expect(idp.contains("demo-hint") && idp.contains("wonderland"), "\(idp.prefix(800))")
            try await Self.signIn(browser)
            try await Self.expectSignedIn(browser, flowURL: samlFlow)

            try await browser.openFlow(otpFlow)
            _ = try await browser.waitForURL(prefix: base + "/web/demo-otp/otp")
            let form = try await browser.pageSource()
            #expect(form.contains(simulator + "/control/otp/code?user=alice"), "the OTP form does not say where the passcode is: \(form.prefix(800))")
            let code = try #require(try await Self.call(codeLine, token: otpToken)["code"] as? String)
            try await browser.sendKeys(code, to: try await browser.findElement(css: "input[name=passcode]"))
            try await browser.click(try await browser.findElement(css: "#submit"))
            try await Self.expectSignedIn(browser, flowURL: otpFlow)

            // Parley's own credentials form: a wrong password shows it again with an error.
            try await browser.openFlow(formFlow)
            try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
            try await browser.sendKeys("not-the-password", to: try await browser.findElement(css: "#password"))
            try await browser.click(try await browser.findElement(css: "form button[type=submit]"))
            _ = try await browser.findElement(css: "#error[role=alert]")
            try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
            try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
            try await browser.click(try await browser.findElement(css: "form button[type=submit]"))
            try await Self.expectSignedIn(browser, flowURL: formFlow)
        }

        // The browser app, as printed: its page, on the simulator's origin, registers through
        // Parley's module, is sent to sign in, comes back and shows the answer; the page can read
        // nothing of Parley's. A browser of its own: the one above is signed in at the simulator.
        let browserApp = try Self.paragraph("Browser app:", of: output)
        let open = try #require(browserApp.first { $0.hasPrefix("open ") }, "\(browserApp)")
        let page = String(open.dropFirst("open ".count)).trimmingCharacters(in: CharacterSet(charactersIn: "'"))
        #expect(page == simulator + "/demo/shop.html?parley=" + base, "\(page)")
        try await ChromeDriver.withSession { browser in
            try await browser.navigate(to: page)
            _ = try await browser.waitForURL(prefix: simulator + "/oauth/authorize")
            try await Self.signIn(browser)
            _ = try await browser.waitForURL(prefix: simulator + "/demo/shop.html?", timeout: .seconds(20))
            let answer = try await browser.findElement(css: "#answer[data-status='200']")
            #expect(answer.id.isEmpty == false)
            let shown = try await browser.pageSource()
            #expect(shown.contains("hello oauth") && shown.contains("alice"), "\(shown.prefix(800))")
            let readable = try await browser.evaluate("return [document.cookie, localStorage.length, sessionStorage.length];")
            #expect(readable == #"["",0,0]"#, "\(readable)")
        }

        // "Run the call again": each now reaches the upstream as the signed-in user.
        let afterOAuth = try await Self.call(oauth.calls[0], token: oauthToken)
        #expect(afterOAuth["message"] as? String == "hello oauth" && afterOAuth["sub"] as? String == "alice", "\(afterOAuth)")
        // The simulator's id_token said who signed in: the registration is alice's now.
        let oauthRegistration = try await Self.call("curl -s \(base)/v1/registrations/me -H \"Authorization: Bearer $T\"", token: oauthToken)
        let oauthUser = oauthRegistration["user"] as? [String: Any]
        #expect(oauthUser?["subject"] as? String == "alice" && oauthUser?["issuer"] as? String == simulator, "\(oauthRegistration)")
        let afterSAML = try await Self.call(saml.calls[0], token: samlToken)
        #expect(afterSAML["user"] as? String == "alice" && afterSAML["via"] as? String == "saml", "\(afterSAML)")
        let afterOTP = try await Self.call(otp.calls[0], token: otpToken)
        #expect(afterOTP["user"] as? String == "alice" && afterOTP["via"] as? String == "basic-otp", "\(afterOTP)")
        let afterForm = try await Self.call(form.calls[0], token: formToken)
        #expect(afterForm["user"] as? String == "alice", "\(afterForm)")

        // Administration, as printed: the password registration listed, its token revoked (the next
        // call gets a new one by itself), the audit log showing the revocation.
        let administration = try Self.paragraph("Administration:", of: output)
        #expect(administration.contains { $0.hasPrefix("parley admin audit") }, "\(administration)")
        let answers = try await Self.shell(administration.joined(separator: "\n")).split(separator: "\n")
            .map { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        #expect(answers.count == 3, "\(answers)")
        let listed = answers.first.flatMap { $0?["items"] as? [[String: Any]] }
        #expect(listed?.count == 1 && listed?.first?["destination"] as? String == "demo-password", "\(answers)")
        #expect(answers.dropFirst().first.flatMap { $0?["revoked"] as? Int } == 1, "\(answers)")
        let audit = answers.dropFirst(2).first.flatMap { $0?["items"] as? [[String: Any]] } ?? []
        #expect(audit.contains { $0["action"] as? String == "admin.revocation" }, "\(audit)")
        let regranted = try await Self.call(password.calls[0], token: passwordToken)
        #expect(regranted["sub"] as? String == "alice", "after the revocation: \(regranted)")

        // Key rotation, as printed: Parley restarted with a new key first, `parley rekey`, the old
        // key dropped and Parley restarted again; every registration's secrets still open.
        let rotation = try Self.paragraph("Key rotation:", of: output)
        #expect(rotation.contains { $0.contains("parley rekey") }, "\(rotation)")
        let report = try await Self.shell(rotation.joined(separator: "\n"), seconds: 200)
        #expect(report.contains("no longer in use: demo"), "\(report)")
        let ring = try String(contentsOfFile: directory + "/demo-keys", encoding: .utf8)
        #expect(!ring.contains(",") && !ring.hasPrefix("demo:"), "the ring still has the old key")
        // Each restart says so on a line of its own (the walk-through's text says "Parley restarted"
        // too), the second one just after parley-ready reappears, which is what the block waits for.
        let restarts = { demo.log.components(separatedBy: "parley demo: Parley restarted").count - 1 }
        let deadline = ContinuousClock.now + .seconds(10)
        while restarts() < 2 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(restarts() == 2, "two restarts")
        let rekeyedBasic = try await Self.call(basic.calls[0], token: basicToken)
        #expect(rekeyedBasic["user"] as? String == "alice", "after the rotation: \(rekeyedBasic)")
        let rekeyedForm = try await Self.call(form.calls[0], token: formToken)
        #expect(rekeyedForm["user"] as? String == "alice", "after the rotation: \(rekeyedForm)")
        let rekeyedOAuth = try await Self.call(oauth.calls[0], token: oauthToken)
        #expect(rekeyedOAuth["sub"] as? String == "alice", "after the rotation: \(rekeyedOAuth)")
    }

    @Test func aTakenPortIsNamedWithTheVariableThatMovesIt() async throws {
        let directory = NSTemporaryDirectory() + "parley-demo-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let parleyPort = try LoopbackSocket(listening: true)
        let simulatorPort = try LoopbackSocket(listening: true)
        let postgresPort = try LoopbackSocket(listening: true)
        let tlsPort = try LoopbackSocket(listening: true)
        let environment = Self.environment(
            directory: directory, simulatorPort: simulatorPort.port, postgresPort: postgresPort.port, tlsPort: tlsPort.port)
        let demo = try await Self.start(environment: environment, port: parleyPort.port)
        let status = try await demo.waitForExit(timeout: .seconds(60))
        #expect(status != 0)
        let log = demo.log
        #expect(log.contains("port \(parleyPort.port) (Parley): set PARLEY_LISTEN"), "\(log)")
        #expect(log.contains("port \(simulatorPort.port) (the upstream simulator): set PARLEY_DEMO_SIMULATOR_PORT"), "\(log)")
        #expect(log.contains("port \(postgresPort.port) (the demo's PostgreSQL): set PARLEY_DEMO_PG_PORT"), "\(log)")
        #expect(log.contains("port \(tlsPort.port) (nginx, the client-certificate port in front of the simulator): set PARLEY_DEMO_TLS_PORT"), "\(log)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/postgres"))
    }
}
