import Conversation
import CurlTransport
import Foundation
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

/// Three real `parley` processes on one PostgreSQL, behind Debian's nginx configured by the
/// deploy kit's own example (deploy/nginx/parley.conf: only the instance addresses, the listen
/// address and the certificate paths are changed), with the public URL carrying the `/parley`
/// prefix over TLS: a registration and proxied calls, an OAuth2 sign-in in headless Chromium
/// whose start page, callback and the thin client's long-poll land on three different instances,
/// and load through which one instance is stopped with SIGTERM without a single failed request.
@Suite(.serialized) struct BalancerLiveTests {
    @Test func threeInstancesBehindTheExampleNginx() async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let balancerPort = try FreePort.find()
            let publicURL = "https://127.0.0.1:\(balancerPort)/parley"
            let simulatorURL = "http://127.0.0.1:\(simulatorPort)"
            let destinations = try FaultTests.destinationsFile(
                """
                destinations:
                  - name: sim
                    url: \(simulatorURL)
                    basic: {}
                  - name: as
                    url: \(simulatorURL)
                    oauth2:
                      grant: authorization_code
                      authorizationEndpoint: \(simulatorURL)/oauth/authorize
                      tokenEndpoint: \(simulatorURL)/oauth/token
                      clientId: parley-public
                """)
            defer { try? FileManager.default.removeItem(atPath: destinations) }
            var environment = ServeTests.environment(database: database, destinations: destinations)
            environment["PARLEY_PUBLIC_URL"] = publicURL
            environment["PARLEY_TRUSTED_PROXIES"] = "127.0.0.1"
            environment["PARLEY_MIGRATE_ON_START"] = "false"
            // A shorter grace than the default 25 s, to keep the run short.
            environment["PARLEY_SHUTDOWN_GRACE_SECONDS"] = "\(Self.shutdownGrace)"

            // As in Kubernetes: the migration Job first, then instances that do not migrate.
            let migrate = try await ParleyProcess.start(arguments: ["migrate"], environment: environment, waitForReady: false)
            #expect(try await migrate.waitForExit() == 0, "\(migrate.log)")
            var started: [ParleyProcess] = []
            for _ in 0..<3 { started.append(try await ParleyProcess.start(environment: environment)) }
            let instances = started
            defer { Task { for instance in instances { await instance.stop() } } }
            for instance in instances {
                #expect(try await RawHTTP.request(port: instance.port, method: "GET", target: "/readyz").status == 200)
            }

            let snippet = try BalancerExample.nginx(
                example: String(contentsOfFile: DeployKitTests.deploy + "/nginx/parley.conf", encoding: .utf8),
                instancePorts: instances.map(\.port), listenPort: balancerPort,
                certificate: certificates.serverCertificatePath, key: certificates.serverKeyPath)
            let nginx = try await ExampleNginx.start(snippet: snippet, port: balancerPort)
            defer { nginx.remove() }
            let client = BalancerClient(base: publicURL, ca: certificates.caPEM)
            defer { client.shutdown() }

            do {
                try await Self.registrationAndProxiedCalls(client, instances, simulator)
                try await Self.theHAProxyExampleServesToo(instances, certificates)
                try await Self.signInAcrossInstances(client, instances, publicURL: publicURL, simulatorURL: simulatorURL)
                try await Self.sigtermUnderLoad(client, instances, nginx, simulator, simulatorPort: simulatorPort)
                try await Self.withoutRetriesAClientSeesTheStop(environment, instances, certificates, simulator)
            } catch {
                Issue.record("nginx error log: \(nginx.errorLog.suffix(1500))")
                throw error
            }
            for instance in instances { await instance.stop() }
            for (index, instance) in instances.enumerated() {
                // The stopped instance's cancelled long-poll is the known issue recorded above.
                let errors = instance.log.split(separator: "\n").filter {
                    $0.contains("http.status=500") && !(index == 1 && $0.contains("http.route=/v1/flows/{id} "))
                }
                #expect(errors.isEmpty, "500s on instance \(index): \(errors)")
            }
        }
    }

    // MARK: registration, proxied calls, what the example keeps out

    static func registrationAndProxiedCalls(_ client: BalancerClient, _ instances: [ParleyProcess], _ simulator: SimulatorState) async throws {
        let created = try await client.call(
            "POST", "/v1/registrations", json: #"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#)
        #expect(created.status == 201, "\(created.text)")
        let token = try #require(created.json?["clientToken"] as? String)
        let data = try await client.call("GET", "/v1/proxy/api/data", token: token)
        #expect(data.status == 200, "\(data.text)")
        #expect(data.json?["user"] as? String == "alice")
        #expect(data.headers["Parley-Request-Id"] != nil)

        // The prefix is stripped and nothing else: the raw target reaches Parley, which refuses an
        // encoded slash and an empty segment itself (nginx's decoded, merged URI would pass them).
        for target in ["/v1/proxy/echo/a%2Fb", "/v1/proxy/echo/a//b"] {
            let refused = try await client.call("GET", target, token: token)
            #expect(refused.status == 400, "\(target): \(refused.status) \(refused.text)")
            #expect(refused.json?["code"] as? String == "invalid_request", "\(target)")
        }
        let echoed = try await client.call("GET", "/v1/proxy/echo/a,b?q=%2F", token: token)
        #expect(echoed.json?["path"] as? String == "/echo/a,b", "\(echoed.text)")
        #expect(echoed.json?["query"] as? String == "q=%2F", "\(echoed.text)")
        // The balancer's forwarded headers stop at Parley.
        #expect((echoed.json?["headers"] as? [String: [String]])?["x-forwarded-for"] == nil)

        // A POST with a body, and a MERGE through the no-retry location, both arrive whole.
        let body = String(repeating: "p", count: 70_000)
        let posted = try await client.call("POST", "/v1/proxy/echo/post", token: token, body: Array(body.utf8))
        #expect(posted.status == 200, "\(posted.text)")
        #expect(posted.json?["bodyBytes"] as? Int == 70_000)
        let merged = try await client.call("MERGE", "/v1/proxy/echo/merge", token: token, body: Array(#"{"a":1}"#.utf8))
        #expect(merged.headers["Parley-Request-Id"] != nil, "MERGE did not reach Parley: \(merged.status) \(merged.text)")
        // An instance's log line follows its answer through a pipe: wait (bounded) for it.
        try await poll(within: .seconds(5), "MERGE in an instance's log") { instances.contains { $0.log.contains("http.method=MERGE") } }

        // An upstream's 503 passes through and is not resent to other instances (nor counted against them).
        let before = simulator.requests(route: "GET /status")
        let unavailable = try await client.call("GET", "/v1/proxy/status/503", token: token)
        #expect(unavailable.status == 503)
        #expect(simulator.requests(route: "GET /status") == before + 1, "the balancer resent an upstream's 503")
        #expect(try await client.call("GET", "/v1/proxy/api/data", token: token).status == 200)

        // The operations endpoints are not public; the bare prefix redirects.
        for path in ["/metrics", "/readyz", "/healthz"] {
            let hidden = try await client.call("GET", path)
            #expect(hidden.status == 404, "\(path)")
            #expect(hidden.headers["Parley-Request-Id"] == nil, "\(path) reached Parley")
        }
        let bare = try await client.call("GET", "", token: nil)
        #expect(bare.status == 308)
        #expect(bare.headers["Location"]?.hasSuffix("/parley/") == true, "\(bare.headers["Location"] ?? "none")")
    }

    /// deploy/haproxy/parley.cfg in front of the same instances (certificate, bind address and
    /// servers replaced): the prefix goes, the raw target stays, /readyz checks see every instance
    /// up, the operations endpoints stay inside.
    static func theHAProxyExampleServesToo(_ instances: [ParleyProcess], _ certificates: TestCertificates) async throws {
        let pem = certificates.directory + "/haproxy.pem"
        try (String(contentsOfFile: certificates.serverCertificatePath, encoding: .utf8) + String(contentsOfFile: certificates.serverKeyPath, encoding: .utf8))
            .write(toFile: pem, atomically: true, encoding: .utf8)
        let port = try FreePort.find()
        let configuration = try BalancerExample.haproxy(
            example: String(contentsOfFile: DeployKitTests.deploy + "/haproxy/parley.cfg", encoding: .utf8),
            certificate: pem, listenPort: port, instancePorts: instances.map(\.port))
        let checksBefore = instances.map { count($0.log, route: "/readyz") }
        let haproxy = try await ExampleHAProxy.start(configuration: configuration, port: port)
        defer { haproxy.remove() }
        let client = BalancerClient(base: "https://127.0.0.1:\(port)/parley", ca: certificates.caPEM)
        defer { client.shutdown() }

        let created = try await client.call(
            "POST", "/v1/registrations", json: #"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#)
        #expect(created.status == 201, "\(created.text)")
        let token = try #require(created.json?["clientToken"] as? String)
        for _ in 0..<3 {
            let data = try await client.call("GET", "/v1/proxy/api/data", token: token)
            #expect(data.status == 200, "\(data.text)")
        }
        let refused = try await client.call("GET", "/v1/proxy/echo/a%2Fb", token: token)
        #expect(refused.status == 400 && refused.json?["code"] as? String == "invalid_request", "\(refused.status) \(refused.text)")
        let echoed = try await client.call("GET", "/v1/proxy/echo/a,b?q=%2F", token: token)
        #expect(echoed.json?["path"] as? String == "/echo/a,b" && echoed.json?["query"] as? String == "q=%2F", "\(echoed.text)")
        let hidden = try await client.call("GET", "/metrics")
        #expect(hidden.status == 404 && hidden.headers["Parley-Request-Id"] == nil)
        #expect(try await client.call("GET", "").status == 308)
        // The requests went round the three servers, and no health check took one down.
        for name in ["parley1", "parley2", "parley3"] {
            #expect(haproxy.log.contains("parley/\(name) "), "no request reached \(name): \(haproxy.log.suffix(1500))")
        }
        #expect(!haproxy.log.contains(" is DOWN"), "\(haproxy.log.suffix(1500))")
        try await poll(within: .seconds(8), "HAProxy's /readyz checks to reach every instance") {
            instances.indices.allSatisfy { count(instances[$0].log, route: "/readyz") > checksBefore[$0] }
        }
    }

    // MARK: OAuth2 in Chromium across three instances

    static func signInAcrossInstances(_ client: BalancerClient, _ instances: [ParleyProcess], publicURL: String, simulatorURL: String) async throws {
        let created = try await client.call("POST", "/v1/registrations", json: #"{"destination":"as"}"#)
        let token = try #require(created.json?["clientToken"] as? String)
        let challenged = try await client.call("GET", "/v1/proxy/oauth-api/data", token: token)
        #expect(challenged.status == 401)
        #expect(challenged.json?["code"] as? String == "interaction_required")
        let flow = try #require(challenged.json?["flow"] as? [String: Any])
        let flowID = try #require(flow["id"] as? String)
        let flowURL = try #require(flow["url"] as? String)
        #expect(flowURL.hasPrefix(publicURL + "/flows/\(flowID)?k="), "flow URLs carry the public prefix: \(flowURL)")

        // The thin client long-polls first (through nginx, so round robin sends it to the next
        // instance); the browser's start page, its stylesheet, its confirmation and the callback
        // then take the instances after it.
        let polling = ContinuousClock.now
        async let waited = client.call("GET", "/v1/flows/\(flowID)?wait=30", token: token)
        try await ChromeDriver.withSession(arguments: ChromeDriver.defaultBrowserArguments + ["--ignore-certificate-errors"]) { browser in
            try await browser.openFlow(flowURL)
            let user = try await browser.findElement(css: "#username")
            let authorize = try await browser.currentURL()
            #expect(authorize.hasPrefix(simulatorURL + "/oauth/authorize?"), "\(authorize)")
            let callback = publicURL + "/callback/oauth2"
            let encoded = callback.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "-._~").union(.alphanumerics)) ?? callback
            #expect(authorize.contains("redirect_uri=" + encoded), "redirect_uri is not the public callback: \(authorize)")
            try await browser.sendKeys("alice", to: user)
            try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
            try await browser.click(try await browser.findElement(css: "#login"))
            _ = try await browser.waitForURL(prefix: publicURL + "/flows/\(flowID)/done", timeout: .seconds(20))
            #expect(try await browser.pageSource().contains("data-parley-flow-status=\"completed\""))
        }
        let status = try await waited
        #expect(status.status == 200)
        #expect(status.json?["status"] as? String == "completed")
        #expect(ContinuousClock.now - polling < .seconds(25), "the long-poll ran into its 30 s wait instead of waking")
        let retried = try await client.call("GET", "/v1/proxy/oauth-api/data", token: token)
        #expect(retried.status == 200, "\(retried.text)")
        #expect(retried.json?["sub"] as? String == "alice")

        // Which instance served what, from each instance's own access log (its lines follow the
        // answers through a pipe: wait, bounded, until each route was logged somewhere).
        func servedBy(_ route: String) -> [Int] {
            instances.indices.filter { Self.count(instances[$0].log, route: route) > 0 }
        }
        try await poll(within: .seconds(5), "the flow's requests in the instances' logs") {
            ["/flows/{id}", "/flows/{id}/confirm", "/callback/oauth2", "/v1/flows/{id}"].allSatisfy { !servedBy($0).isEmpty }
        }
        let page = servedBy("/flows/{id}")
        let confirmation = servedBy("/flows/{id}/confirm")
        let callback = servedBy("/callback/oauth2")
        let poll = servedBy("/v1/flows/{id}")
        #expect(
            page.count == 1 && confirmation.count == 1 && callback.count == 1 && poll.count == 1,
            "start page \(page), confirmation \(confirmation), callback \(callback), long-poll \(poll)")
        if let page = page.first, let confirmation = confirmation.first, let callback = callback.first, let poll = poll.first {
            // Round robin also hands out the pages' stylesheet requests, so which step lands where
            // shifts with them; what matters is that one browser's steps crossed instances, and
            // that the flow finished on another instance than the one holding the long-poll.
            #expect(page != confirmation, "the start page and its confirmation hit the same instance")
            #expect(callback != poll, "the flow finished on the long-poll's own instance: no wake-up across instances was shown")
            print(
                "[measured] balancer: start page on instance \(page), confirmation on \(confirmation), callback on \(callback), long-poll on \(poll)")
        }
    }

    // MARK: SIGTERM under load

    struct Outcome: Sendable {
        let status: Int?
        let failure: String?
        let ended: ContinuousClock.Instant
    }

    struct LoadReport {
        var all: [Outcome]
        var failed: [Outcome] { all.filter { $0.status != 200 } }
        /// Proxied calls the stopped instance answered (200, nginx's log) after it got SIGTERM.
        var finishedAfterSignal: Int
        /// The call sent to the stopped instance itself, in flight at the signal: its status
        /// (nil: no answer) and whether it ended after the signal.
        var held: (status: Int?, endedAfterSignal: Bool)
        var exitStatus: Int32
        var drained: Duration
        /// nginx access-log lines of calls it sent to more than one instance.
        var resent: [String]
        /// What the stopped instance logged after the signal.
        var victimLogAfterSignal: String

        var summary: String {
            "\(all.count) proxied GETs by 4 clients, \(failed.count) failed; the SIGTERM'd instance answered \(finishedAfterSignal) "
                + "of them and the call it held (\(held.status.map(String.init) ?? "no answer")) after the signal and exited "
                + "(\(exitStatus)) \(drained) after it; \(resent.count) resent by nginx to another instance "
                + "\(resent.prefix(3).map { String($0.split(separator: " upstream=").last ?? "") })"
        }
    }

    /// Four clients send proxied GETs (150 ms upstream each) through nginx in a loop; once the
    /// victim has served its share, it gets SIGTERM, with one more call (1.5 s upstream) sent to
    /// it directly and seen at the upstream before; the load goes on until 60 more answers came
    /// after the victim exited.
    static func loadWhileStopping(
        _ victim: ParleyProcess, _ instances: [ParleyProcess], _ client: BalancerClient, _ nginx: ExampleNginx, _ simulator: SimulatorState
    ) async throws -> LoadReport {
        let created = try await client.call(
            "POST", "/v1/registrations", json: #"{"destination":"sim","credentials":{"username":"alice","password":"wonderland"}}"#)
        let token = try #require(created.json?["clientToken"] as? String)
        let route = "/v1/proxy/**"
        let servedBefore = count(victim.log, route: route)
        let running = Flag()
        let outcomes = Recorder()

        return try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while running.isOn {
                        let outcome: Outcome
                        do {
                            let answer = try await client.call("GET", "/v1/proxy/slow?ms=150", token: token)
                            outcome = Outcome(status: answer.status, failure: answer.status == 200 ? nil : answer.text, ended: .now)
                        } catch {
                            outcome = Outcome(status: nil, failure: "\(error)", ended: .now)
                        }
                        outcomes.add(outcome)
                    }
                }
            }
            // A wait below that times out ends the load too, instead of leaving the group waiting for it.
            defer { running.turnOff() }
            // Every instance is carrying the load before the signal.
            try await poll(within: .seconds(15), "the victim to serve the load") {
                count(victim.log, route: route) >= servedBefore + 10 && instances.allSatisfy { count($0.log, route: route) > 0 }
            }
            // A call the victim holds when the signal comes. Sent to it directly: nginx's round robin
            // may have nothing in flight there at that instant (a run on 2026-11-28 had none).
            let heldMilliseconds = 1500
            let heldRoute = "GET /slow?ms=\(heldMilliseconds)"
            let heldBefore = simulator.requests(route: heldRoute)
            let held = Task { () -> (status: Int?, ended: ContinuousClock.Instant) in
                let answer = try? await RawHTTP.request(
                    port: victim.port, method: "GET", target: "/v1/proxy/slow?ms=\(heldMilliseconds)",
                    headers: [("Authorization", "Bearer \(token)")])
                return (answer?.status, .now)
            }
            guard await simulator.waitForRequests(route: heldRoute, count: heldBefore + 1, timeout: .seconds(10)) else {
                throw TestHarnessError("the call sent to the victim did not reach the upstream")
            }
            let mark = victim.log.count
            let signalled = ContinuousClock.now
            let signalledAt = Date().timeIntervalSince1970
            victim.signal(SIGTERM)
            let exit = try await victim.waitForExit(timeout: .seconds(40))
            let exited = ContinuousClock.now
            // The load goes on through the others for a while (60 more answers, some 2 s).
            try await poll(within: .seconds(20), "the load to go on after the victim exited") {
                outcomes.all.filter { $0.ended > exited }.count >= 60
            }
            running.turnOff()
            try await group.waitForAll()
            let heldOutcome = await held.value

            let afterSignal = String(victim.log.dropFirst(mark))
            // Answered by the victim alone, with 200, and finished (nginx's $msec) after the signal.
            let finished = nginx.accessLog.filter { line in
                guard line.contains("/parley/v1/proxy/slow"), line.contains(" upstream=127.0.0.1:\(victim.port) upstream_status=200 "),
                    let end = line.split(separator: " t=").last.flatMap({ Double($0) })
                else { return false }
                return end > signalledAt
            }
            let resent = nginx.accessLog.filter { line in
                line.contains("/parley/v1/proxy/slow") && line.contains(", ")
            }
            return LoadReport(
                all: outcomes.all, finishedAfterSignal: finished.count, held: (heldOutcome.status, heldOutcome.ended > signalled),
                exitStatus: exit, drained: exited - signalled, resent: resent,
                victimLogAfterSignal: afterSignal)
        }
    }

    static let shutdownGrace = 5

    /// Three thin clients long-poll pending flows (one lands on each instance), then the load
    /// starts and the middle instance gets SIGTERM. No proxied call fails; the flows are then
    /// completed, and every long-poll, the one the stopped instance held included, answers 200.
    static func sigtermUnderLoad(
        _ client: BalancerClient, _ instances: [ParleyProcess], _ nginx: ExampleNginx, _ simulator: SimulatorState, simulatorPort: Int
    ) async throws {
        var flows: [(token: String, id: String, url: String)] = []
        for _ in 0..<3 {
            let created = try await client.call("POST", "/v1/registrations", json: #"{"destination":"as"}"#)
            let token = try #require(created.json?["clientToken"] as? String)
            let flow = try await client.call("POST", "/v1/flows", token: token, json: "{}")
            flows.append((token, try #require(flow.json?["id"] as? String), try #require(flow.json?["url"] as? String)))
        }
        let held = flows
        try await withThrowingTaskGroup(of: BalancerClient.Answer.self) { polls in
            for flow in held {
                polls.addTask { try await client.call("GET", "/v1/flows/\(flow.id)?wait=30", token: flow.token) }
            }
            // All three are at the instances (round robin: one each) before anything else is sent.
            try await poll(within: .seconds(10), "the long-polls to reach the instances") {
                (try? await nginx.requestsInProgress()) ?? 0 >= 3
            }

            let report = try await loadWhileStopping(instances[1], instances, client, nginx, simulator)
            #expect(report.all.count >= 60)
            #expect(
                report.failed.isEmpty,
                "\(report.failed.count) of \(report.all.count) requests failed: \(report.failed.prefix(5).map { "\($0.status.map(String.init) ?? "-") \($0.failure ?? "")" })")
            #expect(report.exitStatus == 0, "the drained instance exited with \(report.exitStatus)")
            // The draining instance finished what it held: the call in flight there at the signal.
            #expect(
                report.held.status == 200 && report.held.endedAfterSignal,
                "the call the victim held when it got SIGTERM: \(report.held.status.map(String.init) ?? "no answer")")
            print("[measured] balancer, SIGTERM under load: \(report.summary)")

            // The long-poll the stopped instance held ended there (answered or cut off).
            let poll = "http.route=/v1/flows/{id} "
            #expect(report.victimLogAfterSignal.contains(poll), "the stopped instance held no long-poll")
            // It answered that long-poll at once with the flow as it was (pending), instead of
            // holding the drain for the whole grace period.
            #expect(!report.victimLogAfterSignal.contains("problem.code=internal_error"))
            #expect(report.drained < .seconds(Self.shutdownGrace), "draining waited out the grace period")

            // The flows complete (no browser needed here); every long-poll answers, through the balancer.
            for flow in held { try await Self.complete(flow.url, client: client, simulatorPort: simulatorPort) }
            var answered = 0
            var earlyAnswers = 0
            for try await answer in polls {
                #expect(answer.status == 200, "a long-poll failed: \(answer.status) \(answer.text)")
                var status = answer.json?["status"] as? String
                if status == "pending", let id = answer.json?["id"] as? String, let flow = held.first(where: { $0.id == id }) {
                    // The stopping instance answered early: the client simply asks again.
                    earlyAnswers += 1
                    let again = try await client.call("GET", "/v1/flows/\(id)?wait=30", token: flow.token)
                    status = again.json?["status"] as? String
                }
                #expect(status == "completed", "\(answer.text)")
                answered += 1
            }
            #expect(answered == 3)
            #expect(earlyAnswers <= 1, "only the stopped instance answers a long-poll early")
            let resentPolls = nginx.accessLog.filter { $0.contains("/parley/v1/flows/") && $0.contains(", ") }
            print("[measured] balancer: long-polls nginx resent after an instance cut them off: \(resentPolls)")
        }
    }

    /// An authorization-code flow finished by hand: the start page and the callback through the
    /// balancer, the login form posted to the simulator's authorization server.
    static func complete(_ flowURL: String, client: BalancerClient, simulatorPort: Int) async throws {
        let target = String(flowURL.dropFirst(client.base.count))
        let page = try await client.call("GET", target)
        let form = try #require(ConfirmationForm(status: page.status, setCookies: page.headers.values("Set-Cookie"), body: page.body))
        let start = try await client.call("POST", ConfirmationForm.target(beside: target), headers: form.headers, body: form.body)
        #expect(start.status == 200)
        let refresh = try #require(start.headers["Refresh"])
        let authorize = String(refresh.dropFirst("0; url=".count))
        let query = try #require(authorize.split(separator: "?", maxSplits: 1).last.map(String.init))
        let login = try await RawHTTP.request(
            port: simulatorPort, method: "POST", target: "/oauth/authorize", headers: [("Content-Type", "application/x-www-form-urlencoded")],
            body: Array((query + "&username=alice&password=wonderland").utf8))
        let callback = try #require(login.header("Location"))
        #expect(callback.hasPrefix(client.base + "/callback/oauth2?"), "\(callback)")
        let finished = try await client.call("GET", String(callback.dropFirst(client.base.count)))
        #expect(finished.status == 303, "\(finished.text)")
    }

    /// The same load against the example with its retries switched off fails: the load test can
    /// tell a balancer that hides an instance's exit from one that does not.
    static func withoutRetriesAClientSeesTheStop(
        _ environment: [String: String], _ instances: [ParleyProcess], _ certificates: TestCertificates, _ simulator: SimulatorState
    ) async throws {
        let replacement = try await ParleyProcess.start(environment: environment)
        defer { Task { await replacement.stop() } }
        let survivors = instances.filter { $0.process.isRunning }
        let pool = survivors + [replacement]
        let example = try String(contentsOfFile: DeployKitTests.deploy + "/nginx/parley.conf", encoding: .utf8)
        let mutated = example.replacingOccurrences(of: "proxy_next_upstream error timeout;", with: "proxy_next_upstream off;")
        #expect(mutated != example)
        let port = try FreePort.find()
        let nginx = try await ExampleNginx.start(
            snippet: try BalancerExample.nginx(
                example: mutated, instancePorts: pool.map(\.port), listenPort: port,
                certificate: certificates.serverCertificatePath, key: certificates.serverKeyPath),
            port: port)
        defer { nginx.remove() }
        let client = BalancerClient(base: "https://127.0.0.1:\(port)/parley", ca: certificates.caPEM)
        defer { client.shutdown() }
        let report = try await loadWhileStopping(replacement, pool, client, nginx, simulator)
        #expect(!report.failed.isEmpty, "with retries off no client noticed the stop")
        #expect(report.failed.allSatisfy { $0.status == 502 }, "\(report.failed.map { $0.status.map(String.init) ?? $0.failure ?? "" })")
        #expect(report.resent.isEmpty)
        print("[measured] balancer without retries: \(report.summary)")
    }

    // MARK: helpers

    /// Access-log lines of `route` (Parley logs the route template, method and status per request).
    static func count(_ log: String, route: String) -> Int {
        log.components(separatedBy: "http.route=\(route) ").count - 1
    }

    static func poll(within limit: Duration, _ what: String, _ condition: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while await !condition() {
            guard ContinuousClock.now < deadline else { throw TestHarnessError("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    final class Recorder: Sendable {
        private let outcomes = Mutex<[Outcome]>([])
        func add(_ outcome: Outcome) { outcomes.withLock { $0.append(outcome) } }
        var all: [Outcome] { outcomes.withLock { $0 } }
    }

    final class Flag: Sendable {
        private let on = Atomic<Bool>(true)
        var isOn: Bool { on.load(ordering: .acquiring) }
        func turnOff() { on.store(false, ordering: .releasing) }
    }
}

/// An HTTPS client for the balancer (libcurl through CurlTransport, trusting the test CA).
final class BalancerClient: Sendable {
    struct Answer: Sendable {
        let status: Int
        let headers: HeaderFields
        let body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
    }

    let base: String
    let ca: [UInt8]
    let transport = CurlTransport(logger: quietLogger)

    init(base: String, ca: [UInt8]) {
        self.base = base
        self.ca = ca
    }

    func call(
        _ method: String, _ path: String, token: String? = nil, json: String? = nil, headers extra: [(String, String)] = [], body: [UInt8] = []
    ) async throws -> Answer {
        var headers = HeaderFields()
        for (name, value) in extra { headers.append(name, value) }
        if let token { headers.append("Authorization", "Bearer \(token)") }
        var bytes = body
        if let json {
            headers.append("Content-Type", "application/json")
            bytes = Array(json.utf8)
        }
        let request = UpstreamRequest(
            method: method, url: base + path, headers: headers, body: bytes.isEmpty ? .empty : .bytes(bytes),
            tls: TLSOptions(caPEM: ca), timeouts: Timeouts(connect: .seconds(5), total: .seconds(60), idle: .seconds(45)))
        let response = try await transport.send(request)
        return Answer(status: response.status, headers: response.headers, body: try await response.body.collect(upTo: 1 << 20))
    }

    func shutdown() { transport.shutdown() }
}
