import Foundation
import ParleyTesting
import Testing

/// The deploy kit (`deploy/`) checked without a container engine or a cluster: the Containerfile
/// parsed and linted, its runtime packages held against what the binary really links, its health
/// check run against a live instance; the Kubernetes manifests validated against the Kubernetes
/// API schemas (strict) and against each other; the balancer examples checked by nginx and HAProxy
/// themselves. The image itself is built and run by ContainerImageLiveTests.
@Suite(.serialized) struct DeployKitTests {
    static let deploy = packageRoot + "/deploy"
    static let tools = packageRoot + "/scripts/deploy-tools.sh"

    static func read(_ path: String) throws -> String { try String(contentsOfFile: deploy + "/" + path, encoding: .utf8) }

    static func containerfile() throws -> Containerfile { try Containerfile(text: read("Containerfile")) }

    // MARK: Containerfile

    @Test func containerfileHasABuildAndASlimNonRootRuntimeStage() throws {
        let file = try Self.containerfile()
        #expect(file.stages.count == 2)
        let build = try #require(file.stage(named: "build"))
        let runtime = try #require(file.stages.last)
        #expect(build.image.firstMatch(of: /^swift:6\.\d+-bookworm$/) != nil, "builder: \(build.image)")
        #expect(runtime.image == "debian:bookworm-slim")

        // The release binary, Swift runtime linked in, and only that product.
        let buildRuns = build.all("RUN").map(\.arguments).joined(separator: "\n")
        #expect(buildRuns.contains("swift build -c release --product parley --static-swift-stdlib"))
        #expect(Set(build.aptPackages).isSuperset(of: ["libcurl4-openssl-dev", "libpq-dev", "libssl-dev", "libpsl-dev", "libxmlsec1-dev", "pkg-config"]))

        // The runtime stage: exactly the C libraries and the CA bundle, the binary from the build stage.
        #expect(Set(runtime.aptPackages) == ["libcurl4", "libpq5", "libssl3", "libpsl5", "libxmlsec1-openssl", "ca-certificates"], "\(runtime.aptPackages)")
        let copies = runtime.all("COPY").map(\.arguments)
        #expect(copies.contains { $0.hasPrefix("--from=build ") }, "\(copies)")
        #expect(runtime.all("COPY").count == 1, "nothing but the build output is copied in")
        #expect(runtime.all("ENTRYPOINT").last?.arguments == #"["/usr/local/bin/parley"]"#)
        #expect(runtime.all("CMD").last?.arguments == #"["serve"]"#)

        // Not root, as a number (runAsNonRoot can check it), the same uid as the manifests'.
        let user = try #require(runtime.all("USER").last?.arguments)
        let uid = try #require(Int(user.split(separator: ":")[0]), "USER \(user) is not numeric")
        #expect(uid != 0)
        let deployment = try #require(try Self.manifests().first { $0["kind"] as? String == "Deployment" })
        let podSecurity = try Self.dig(deployment, "spec", "template", "spec", "securityContext") as? [String: Any]
        #expect(podSecurity?["runAsUser"] as? Int == uid)

        // Read-only root: the spool goes to /tmp, which is a volume; the binary carries its migrations.
        let environment = runtime.all("ENV").map(\.arguments).joined(separator: " ")
        #expect(environment.contains("PARLEY_SPOOL_DIR=/tmp"))
        #expect(environment.contains("PARLEY_LISTEN=0.0.0.0:8080"))
        #expect(!environment.contains("PARLEY_MIGRATIONS_DIR"), "migrations are embedded, not read from a folder")
        #expect(runtime.all("VOLUME").map(\.arguments) == [#"["/tmp"]"#])
        #expect(runtime.all("EXPOSE").map(\.arguments) == ["8080"])

        // A health check on /healthz, in exec form (no shell form that needs /bin/sh -c quoting).
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last)
        let command = try #require(Containerfile.healthcheckCommand(healthcheck))
        #expect(command.first == "bash")
        #expect(command.joined(separator: " ").contains("GET /healthz "))
    }

    /// Every shared library the binary links, apart from the Swift runtime (linked statically into
    /// the image's binary), comes from a package the runtime stage installs or from the base image
    /// (debian:bookworm-slim: the required packages and apt, with what they depend on).
    @Test func theRuntimePackagesProvideEveryLibraryTheBinaryLinks() throws {
        let runtime = try #require(try Self.containerfile().stages.last)
        let linked = try SharedLibraries.packages(of: ParleyProcess.binaryPath())
        #expect(linked.contains { $0.package == "libpq5" }, "\(linked)")
        #expect(!linked.contains { $0.library.contains("swift") }, "\(linked)")

        func missing(installing packages: [String]) throws -> [String] {
            let available = try SharedLibraries.dependencyClosure(of: packages + ["apt"])
            return linked.filter { !available.contains($0.package) }.map { "\($0.library) (\($0.package))" }
        }
        #expect(try missing(installing: runtime.aptPackages) == [])
        // The check can fail: without libpq5 the store's library has no package.
        let withoutPQ = try missing(installing: runtime.aptPackages.filter { $0 != "libpq5" })
        #expect(withoutPQ.contains { $0.contains("libpq.so.5") }, "\(withoutPQ)")
    }

    /// The HEALTHCHECK command itself (bash's /dev/tcp, no curl in the image) against a real
    /// instance: it passes while Parley answers and fails when nothing listens.
    @Test func theHealthcheckCommandPassesAgainstARunningParley() async throws {
        let runtime = try #require(try Self.containerfile().stages.last)
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last)
        let command = try #require(Containerfile.healthcheckCommand(healthcheck))
        let script = try #require(command.last)
        #expect(script.contains("/dev/tcp/127.0.0.1/8080"))

        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let destinations = try ServeTests.destinationsFile(simulatorPort: 1)
        defer { try? FileManager.default.removeItem(atPath: destinations) }
        let parley = try await ParleyProcess.start(environment: ServeTests.environment(database: database, destinations: destinations))
        defer { Task { await parley.stop() } }
        func check(port: Int) throws -> ToolResult {
            let arguments = Array(command.dropFirst().dropLast()) + [script.replacingOccurrences(of: "/8080", with: "/\(port)")]
            return try Tool.run(command[0], arguments)
        }
        #expect(try check(port: parley.port).status == 0)
        #expect(try check(port: FreePort.find()).status != 0, "the check passed with nothing listening")
        await parley.stop()
    }

    @Test func hadolintAcceptsTheContainerfile() throws {
        let lint = try Tool.run(Self.tools, ["hadolint", "--no-color", Self.deploy + "/Containerfile"])
        #expect(lint.status == 0, "\(lint)")
        // The linter does lint: a root user at the end is refused (DL3002).
        let broken = NSTemporaryDirectory() + "parley-Containerfile-" + UUID().uuidString
        try (try Self.read("Containerfile") + "\nUSER root\n").write(toFile: broken, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: broken) }
        let refused = try Tool.run(Self.tools, ["hadolint", "--no-color", broken])
        #expect(refused.status != 0)
        #expect(refused.output.contains("DL3002"), "\(refused)")
    }

    // MARK: Kubernetes

    static let manifestFiles = ["configmap.yaml", "deployment.yaml", "migration-job.yaml", "pdb.yaml", "secret.example.yaml", "service.yaml"]
    /// The oldest release the manifests are meant for, and the newest the schema package knows.
    static let kubernetesVersions = ["1.29.0", "1.37.0"]

    /// kubernetes-validate: the OpenAPI schemas of each Kubernetes release, strict (unknown fields
    /// are errors). A manifest with a misspelt field, a value of the wrong type or a missing
    /// required field is refused, naming the field.
    @Test func manifestsValidateAgainstTheKubernetesSchemas() throws {
        let listed = try FileManager.default.contentsOfDirectory(atPath: Self.deploy + "/kubernetes").filter { $0.hasSuffix(".yaml") }.sorted()
        #expect(listed == Self.manifestFiles, "a manifest this test does not know")
        let paths = Self.manifestFiles.map { Self.deploy + "/kubernetes/" + $0 }
        for version in Self.kubernetesVersions {
            let result = try Tool.run(Self.tools, ["kubernetes-validate", "--strict", "--kubernetes-version", version] + paths)
            #expect(result.status == 0, "Kubernetes \(version): \(result)")
            #expect(result.output.components(separatedBy: " passed for resource ").count - 1 == 7, "\(result)")
        }

        let deployment = try Self.read("kubernetes/deployment.yaml")
        let broken: [(String, String, String)] = [
            ("readinessProbe:", "readynessProbe:", "'readynessProbe' was unexpected"),
            ("replicas: 3", "replicas: \"three\"", "spec.replicas: 'three' is not of type 'integer'"),
            ("containerPort: 8080", "containerPort: [8080]", "containerPort: [8080] is not of type 'integer'"),
            ("  selector:\n    matchLabels:\n      app.kubernetes.io/name: parley\n      app.kubernetes.io/component: server\n", "", "'selector' is a required property"),
        ]
        let directory = NSTemporaryDirectory() + "parley-manifests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (index, (from, to, expected)) in broken.enumerated() {
            #expect(deployment.contains(from), "the mutation \(index) no longer applies")
            let path = directory + "/broken-\(index).yaml"
            try deployment.replacingOccurrences(of: from, with: to).write(toFile: path, atomically: true, encoding: .utf8)
            let result = try Tool.run(Self.tools, ["kubernetes-validate", "--strict", "--kubernetes-version", Self.kubernetesVersions[0], path])
            #expect(result.status != 0, "broken manifest \(index) passed: \(result)")
            #expect(result.output.contains(expected), "\(result)")
        }
    }

    /// What the schemas cannot know: the pieces fit together and follow Parley's rules.
    @Test func manifestsHangTogether() throws {
        let documents = try Self.manifests()
        func one(_ kind: String, _ name: String) throws -> [String: Any] {
            try #require(documents.first { $0["kind"] as? String == kind && (try? Self.dig($0, "metadata", "name")) as? String == name }, "\(kind)/\(name)")
        }
        let deployment = try one("Deployment", "parley")
        let job = try one("Job", "parley-migrate")
        let service = try one("Service", "parley")
        let budget = try one("PodDisruptionBudget", "parley")
        let config = try one("ConfigMap", "parley-config")
        let secrets = try one("Secret", "parley-secrets")
        let destinations = try one("Secret", "parley-destinations")

        let replicas = try #require(try Self.dig(deployment, "spec", "replicas") as? Int)
        #expect(replicas >= 2)
        let pod = try #require(try Self.dig(deployment, "spec", "template", "spec") as? [String: Any])
        let podLabels = try #require(try Self.dig(deployment, "spec", "template", "metadata", "labels") as? [String: String])
        let container = try #require((pod["containers"] as? [[String: Any]])?.first)
        let environment = Self.environment(container)

        // Probes: readiness on /readyz, liveness on /healthz, on the container's port.
        #expect(try Self.dig(container, "readinessProbe", "httpGet", "path") as? String == "/readyz")
        #expect(try Self.dig(container, "livenessProbe", "httpGet", "path") as? String == "/healthz")
        let portName = try #require((container["ports"] as? [[String: Any]])?.first?["name"] as? String)
        #expect(try Self.dig(container, "readinessProbe", "httpGet", "port") as? String == portName)
        #expect(try Self.dig(container, "livenessProbe", "httpGet", "port") as? String == portName)

        // Termination: the preStop pause plus Parley's shutdown grace fit in the grace period.
        let grace = try #require(pod["terminationGracePeriodSeconds"] as? Int)
        let shutdownGrace = Int(environment["PARLEY_SHUTDOWN_GRACE_SECONDS"]?.value ?? "25") ?? 25
        let preStop = (try Self.dig(container, "lifecycle", "preStop", "exec", "command") as? [String]).flatMap { $0.last.flatMap(Int.init) } ?? 0
        #expect(grace > shutdownGrace + preStop, "terminationGracePeriodSeconds \(grace) ≤ \(preStop) + \(shutdownGrace)")

        // Migrations: by the Job, not at start.
        #expect(environment["PARLEY_MIGRATE_ON_START"]?.value == "false")
        let jobContainer = try #require((try Self.dig(job, "spec", "template", "spec", "containers") as? [[String: Any]])?.first)
        #expect(jobContainer["args"] as? [String] == ["migrate"])
        #expect(jobContainer["image"] as? String == container["image"] as? String, "the Job migrates with the Deployment's image")
        #expect(["Never", "OnFailure"].contains(try Self.dig(job, "spec", "template", "spec", "restartPolicy") as? String ?? ""))

        // Security: non-root, read-only root, no privilege escalation; in the Job as well.
        for (what, podSpec, c) in [("Deployment", pod, container), ("Job", try Self.dig(job, "spec", "template", "spec") as? [String: Any] ?? [:], jobContainer)] {
            #expect(try Self.dig(podSpec, "securityContext", "runAsNonRoot") as? Bool == true, "\(what)")
            #expect(try Self.dig(c, "securityContext", "readOnlyRootFilesystem") as? Bool == true, "\(what)")
            #expect(try Self.dig(c, "securityContext", "allowPrivilegeEscalation") as? Bool == false, "\(what)")
            #expect(try Self.dig(c, "resources", "requests", "memory") != nil, "\(what)")
            #expect(try Self.dig(c, "resources", "limits", "memory") != nil, "\(what)")
        }
        #expect(try Self.dig(container, "resources", "requests", "cpu") != nil)

        // The spool: PARLEY_SPOOL_DIR is an emptyDir mount (the only writable place).
        let mounts = (container["volumeMounts"] as? [[String: Any]]) ?? []
        let volumes = (pod["volumes"] as? [[String: Any]]) ?? []
        func volume(mountedAt path: String) -> [String: Any]? {
            guard let name = mounts.first(where: { $0["mountPath"] as? String == path })?["name"] as? String else { return nil }
            return volumes.first { $0["name"] as? String == name }
        }
        #expect(environment["PARLEY_SPOOL_DIR"]?.value == "/tmp")
        #expect(volume(mountedAt: "/tmp")?["emptyDir"] != nil)

        // Secrets and the destinations file: referenced by name and key, and those exist.
        for (variable, key) in [("PARLEY_DATABASE_URL", "database-url"), ("PARLEY_ENCRYPTION_KEYS", "encryption-keys"), ("PARLEY_ADMIN_TOKENS", "admin-tokens")] {
            let reference = environment[variable]?.secret
            #expect(reference?.name == "parley-secrets" && reference?.key == key, "\(variable): \(String(describing: reference))")
            #expect(try Self.dig(secrets, "stringData", key) != nil, "parley-secrets has no \(key)")
        }
        #expect(Self.environment(jobContainer)["PARLEY_DATABASE_URL"]?.secret?.name == "parley-secrets")
        let destinationsPath = try #require(environment["PARLEY_DESTINATIONS"]?.value)
        let directory = (destinationsPath as NSString).deletingLastPathComponent
        let mounted = try #require(volume(mountedAt: directory), "nothing mounted at \(directory)")
        #expect(mounts.first { $0["mountPath"] as? String == directory }?["readOnly"] as? Bool == true)
        #expect(try Self.dig(mounted, "secret", "secretName") as? String == "parley-destinations")
        let file = (destinationsPath as NSString).lastPathComponent
        #expect(try Self.dig(destinations, "stringData", file) as? String != nil)
        let envFrom = (container["envFrom"] as? [[String: Any]])?.compactMap { try? Self.dig($0, "configMapRef", "name") as? String }
        #expect(envFrom == ["parley-config"])
        #expect(try Self.dig(config, "data", "PARLEY_PUBLIC_URL") as? String != nil)

        // Service and budget select the Deployment's pods; the budget leaves one running.
        let serviceSelector = try #require(try Self.dig(service, "spec", "selector") as? [String: String])
        #expect(serviceSelector.allSatisfy { podLabels[$0.key] == $0.value })
        #expect((try Self.dig(service, "spec", "ports") as? [[String: Any]])?.first?["targetPort"] as? String == portName)
        let budgetSelector = try #require(try Self.dig(budget, "spec", "selector", "matchLabels") as? [String: String])
        #expect(budgetSelector.allSatisfy { podLabels[$0.key] == $0.value })
        let maxUnavailable = try Self.dig(budget, "spec", "maxUnavailable") as? Int ?? replicas
        #expect(maxUnavailable < replicas)
    }

    // MARK: Balancers

    @Test func nginxAcceptsTheExample() async throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let snippet = try BalancerExample.nginx(
            example: try Self.read("nginx/parley.conf"), instancePorts: [18_081, 18_082, 18_083], listenPort: 18_443,
            certificate: certificates.serverCertificatePath, key: certificates.serverKeyPath)
        let directory = NSTemporaryDirectory() + "parley-nginx-t-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try snippet.write(toFile: directory + "/parley.conf", atomically: true, encoding: .utf8)
        try BalancerExample.nginxMain(directory: directory, snippetPath: directory + "/parley.conf")
            .write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
        let result = try Tool.run("nginx", ["-t", "-p", directory + "/", "-c", directory + "/nginx.conf", "-e", directory + "/error.log"])
        #expect(result.status == 0, "\(result)")
        #expect(!result.output.contains("[warn]"), "\(result)")

        // The settings the deployment guide promises.
        let example = try Self.read("nginx/parley.conf")
        #expect(example.contains("keepalive_timeout 15s;"), "upstream keep-alive must end before Parley's 20 s head timeout")
        #expect(example.contains("proxy_read_timeout 75s;"), "longer than the 60 s long-poll cap")
        // A long-poll cut off by a stopping instance may have waited that long: it must still be resent.
        #expect(example.contains("proxy_next_upstream_timeout 75s;"))
        let retries = example.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { $0.hasPrefix("proxy_next_upstream ") }
        #expect(
            retries == ["proxy_next_upstream error timeout;", "proxy_next_upstream off;", "proxy_next_upstream error timeout;"],
            "non-idempotent requests must not be resent")
        for header in ["X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"] {
            #expect(example.contains("proxy_set_header \(header) "), "\(header)")
        }
    }

    @Test func haproxyAcceptsTheExample() throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let pem = certificates.directory + "/server-with-key.pem"
        let combined = try String(contentsOfFile: certificates.serverCertificatePath, encoding: .utf8)
            + String(contentsOfFile: certificates.serverKeyPath, encoding: .utf8)
        try combined.write(toFile: pem, atomically: true, encoding: .utf8)
        let example = try Self.read("haproxy/parley.cfg")
        let path = certificates.directory + "/parley.cfg"
        try BalancerExample.haproxy(example: example, certificate: pem).write(toFile: path, atomically: true, encoding: .utf8)
        let result = try Tool.run("haproxy", ["-c", "-f", path])
        #expect(result.status == 0, "\(result)")
        #expect(!result.output.contains("[WARNING]"), "\(result)")

        // haproxy -c does check keywords: a misspelt retry condition is refused.
        let broken = certificates.directory + "/broken.cfg"
        try BalancerExample.haproxy(example: example.replacingOccurrences(of: "retry-on conn-failure", with: "retry-on conn-failures"), certificate: pem)
            .write(toFile: broken, atomically: true, encoding: .utf8)
        let refused = try Tool.run("haproxy", ["-c", "-f", broken])
        #expect(refused.status != 0, "\(refused)")

        #expect(example.contains("http-check send meth GET uri /readyz"))
        #expect(example.contains("timeout server 75s"))
        #expect(example.contains("http-request disable-l7-retry unless { method GET HEAD PUT DELETE OPTIONS }"))
        #expect(example.contains("option redispatch"))
    }

    // MARK: Balancers: two names, and no secret in their logs

    /// Requests that carry what must never be logged (a flow secret, an authorization code, a
    /// passcode, a SAML response through the web path), on Parley's name and on the web origin's.
    static let secretRequests: [(host: String, target: String)] = [
        ("parley.example.com", "/parley/flows/0b5e0f6a-4a5e-4c59-9f0c-1d2e3f4a5b6c?k=SECRET-flow-k"),
        ("parley.example.com", "/parley/callback/oauth2?code=SECRET-code&state=SECRET-state"),
        ("parley.example.com", "/parley/callback/otp?flow=x&k=SECRET-otp-k&passcode=SECRET-passcode"),
        ("web.parley.example.com", "/web/sp/saml/acs?SAMLResponse=SECRET-saml"),
        ("web.parley.example.com", "/web-bind/sp?t=SECRET-ticket"),
    ]

    /// `curl` to `https://host:port/target` (any certificate), answering on 127.0.0.1: the status.
    static func curl(_ host: String, _ port: Int, _ target: String) throws -> Int {
        let result = try Tool.run(
            "curl", ["-sk", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--resolve", "\(host):\(port):127.0.0.1", "https://\(host):\(port)\(target)"])
        return Int(result.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// Waits (bounded) until `lines` holds `count` lines matching `filter`.
    static func waitForLines(_ count: Int, timeout: Duration = .seconds(10), _ lines: () -> [String]) async throws -> [String] {
        let deadline = ContinuousClock.now + timeout
        while lines().count < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        return lines()
    }

    @Test func nginxServesBothNamesAndLogsNoQuery() async throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let port = try FreePort.find()
        // No instance runs: what is proxied fails (502), what is refused at nginx is 404.
        let snippet = try BalancerExample.nginx(
            example: try Self.read("nginx/parley.conf"), instancePorts: [try FreePort.find(), try FreePort.find(), try FreePort.find()],
            listenPort: port, certificate: certificates.serverCertificatePath, key: certificates.serverKeyPath)
        let nginx = try await ExampleNginx.start(snippet: snippet, port: port)
        defer { nginx.remove() }
        for (host, target) in Self.secretRequests {
            #expect(try Self.curl(host, port, target) == 502, "\(host)\(target) was not proxied")
        }
        // The web origin's name reaches the instances for /web/… and /web-bind/… only.
        for target in ["/v1/registrations/me", "/flows/x?k=SECRET-web-flows", "/parley/v1/registrations/me", "/admin/v1/registrations"] {
            #expect(try Self.curl("web.parley.example.com", port, target) == 404, "web.parley.example.com\(target)")
        }
        let lines = try await Self.waitForLines(Self.secretRequests.count + 4) { nginx.exampleAccessLog }
        #expect(lines.count == Self.secretRequests.count + 4, "\(lines)")
        for line in lines { #expect(!line.contains("SECRET") && !line.contains("?"), "logged a query: \(line)") }
        #expect(lines.contains { $0.contains("\"GET /parley/callback/otp HTTP/1.1\"") }, "the path is logged: \(lines)")
        #expect(lines.contains { $0.contains("web.parley.example.com") && $0.contains("\"GET /web/sp/saml/acs HTTP/1.1\"") })
    }

    @Test func haproxyServesBothNamesAndLogsNoQuery() async throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let pem = certificates.directory + "/server-with-key.pem"
        let combined = try String(contentsOfFile: certificates.serverCertificatePath, encoding: .utf8)
            + String(contentsOfFile: certificates.serverKeyPath, encoding: .utf8)
        try combined.write(toFile: pem, atomically: true, encoding: .utf8)
        let port = try FreePort.find()
        let configuration = try BalancerExample.haproxy(
            example: try Self.read("haproxy/parley.cfg"), certificate: pem, listenPort: port,
            instancePorts: [try FreePort.find(), try FreePort.find(), try FreePort.find()])
        let haproxy = try await ExampleHAProxy.start(configuration: configuration, port: port)
        defer { haproxy.remove() }
        // No instance runs: what reaches the backend fails (503), what HAProxy refuses is 404.
        for (host, target) in Self.secretRequests {
            #expect([502, 503].contains(try Self.curl(host, port, target)), "\(host)\(target) was not sent to the instances")
        }
        for target in ["/v1/registrations/me", "/flows/x?k=SECRET-web-flows", "/parley/v1/registrations/me", "/admin/v1/registrations"] {
            #expect(try Self.curl("web.parley.example.com", port, target) == 404, "web.parley.example.com\(target)")
        }
        func requests() -> [String] { haproxy.log.split(separator: "\n").map(String.init).filter { $0.contains(" HTTP/") } }
        let lines = try await Self.waitForLines(Self.secretRequests.count + 4, requests)
        #expect(lines.count == Self.secretRequests.count + 4, "\(haproxy.log.suffix(3000))")
        for line in lines { #expect(!line.contains("SECRET") && !line.contains("?"), "logged a query: \(line)") }
        #expect(lines.contains { $0.contains("\"GET /parley/callback/otp HTTP/1.1\"") }, "the path is logged: \(lines)")
        #expect(lines.contains { $0.contains("{web.parley.example.com") && $0.contains("\"GET /web/sp/saml/acs HTTP/1.1\"") })
    }

    // MARK: helpers

    /// Every document of every manifest, as JSON objects (PyYAML from the deploy-tools venv).
    static func manifests() throws -> [[String: Any]] {
        let script = "import json, sys, yaml; print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]))"
        let result = try Tool.run(tools, ["python", "-c", script] + manifestFiles.map { deploy + "/kubernetes/" + $0 })
        guard result.status == 0, let json = result.output.split(separator: "\n").last,
            let documents = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]]
        else { throw TestHarnessError("reading the manifests: \(result)") }
        return documents
    }

    static func dig(_ object: Any, _ keys: String...) throws -> Any? {
        var current: Any? = object
        for key in keys { current = (current as? [String: Any])?[key] }
        return current
    }

    struct Variable {
        var value: String?
        var secret: (name: String, key: String)?
    }

    static func environment(_ container: [String: Any]) -> [String: Variable] {
        var variables: [String: Variable] = [:]
        for entry in container["env"] as? [[String: Any]] ?? [] {
            guard let name = entry["name"] as? String else { continue }
            var variable = Variable(value: entry["value"] as? String)
            if let reference = (try? dig(entry, "valueFrom", "secretKeyRef")) as? [String: Any],
                let secret = reference["name"] as? String, let key = reference["key"] as? String
            {
                variable.secret = (secret, key)
            }
            variables[name] = variable
        }
        return variables
    }
}
