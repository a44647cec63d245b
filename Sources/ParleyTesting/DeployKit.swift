import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What a command printed (stdout and stderr together) and how it ended.
public struct ToolResult: Sendable, CustomStringConvertible {
    public let status: Int32
    public let output: String
    public var description: String { "exit \(status): \(output.suffix(2000))" }
}

/// Short-lived command-line tools for the deploy-kit tests (linters, `nginx -t`, `ldd`, `dpkg`).
/// Not for daemons: the output is read to its end.
public enum Tool {
    /// Runs `executable` (a path, or a name looked up on `PATH`) to completion.
    public static func run(
        _ executable: String, _ arguments: [String], directory: String? = nil, environment: [String: String] = [:]
    ) throws -> ToolResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable.contains("/") ? executable : try ExternalTool.locate(executable))
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return ToolResult(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }

    /// Whether `name` is an executable on `PATH` (or in the usual system directories).
    public static func exists(_ name: String) -> Bool { (try? ExternalTool.locate(name)) != nil }
}

// MARK: - Containerfile

/// A Containerfile (Dockerfile) read the way the builder reads it: comments and parser
/// directives dropped, continuation lines joined, instructions grouped by stage.
public struct Containerfile: Sendable {
    public struct Instruction: Sendable, CustomStringConvertible {
        /// Upper-cased: `FROM`, `RUN`, `USER`, …
        public let keyword: String
        /// Everything after the keyword, continuation lines joined with a space.
        public let arguments: String
        /// The line the instruction starts on (1-based).
        public let line: Int
        public var description: String { "\(line): \(keyword) \(arguments)" }
    }

    public struct Stage: Sendable {
        /// The image named by `FROM`, with `${ARG}` references to global ARGs resolved to their defaults.
        public let image: String
        /// The image reference as written.
        public let imageAsWritten: String
        /// The `AS` name, if any.
        public let name: String?
        /// Every instruction after `FROM` up to the next `FROM`.
        public let instructions: [Instruction]

        public func all(_ keyword: String) -> [Instruction] { instructions.filter { $0.keyword == keyword } }

        /// The packages of every `apt-get install` in this stage's RUN instructions (options skipped).
        public var aptPackages: [String] {
            var packages: [String] = []
            for run in all("RUN") {
                for command in run.arguments.components(separatedBy: "&&") {
                    let words = command.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
                    guard let install = words.firstIndex(of: "install"), install > 0, words[install - 1] == "apt-get" else { continue }
                    packages += words[(install + 1)...].filter { !$0.hasPrefix("-") && $0 != "\\" }
                }
            }
            return packages
        }
    }

    /// `ARG name=default` before the first `FROM`.
    public let globalArguments: [String: String]
    public let stages: [Stage]

    public init(text: String) throws {
        var logical: [(line: Int, text: String)] = []
        var pending: (line: Int, text: String)?
        for (index, raw) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = raw.trimmingCharacters(in: .whitespaces)
            // Comments (and parser directives) are whole lines, also inside a continued instruction.
            if trimmed.hasPrefix("#") { continue }
            if trimmed.isEmpty {
                if let current = pending {
                    logical.append(current)
                    pending = nil
                }
                continue
            }
            let continues = trimmed.hasSuffix("\\")
            let body = continues ? String(trimmed.dropLast()).trimmingCharacters(in: .whitespaces) : trimmed
            if var current = pending {
                current.text += " " + body
                pending = current
            } else {
                pending = (index + 1, body)
            }
            if !continues, let current = pending {
                logical.append(current)
                pending = nil
            }
        }
        if let current = pending { logical.append(current) }

        var arguments: [String: String] = [:]
        var stages: [Stage] = []
        var current: (image: String, written: String, name: String?, instructions: [Instruction])?
        for (line, text) in logical {
            let keyword = String(text.prefix { !$0.isWhitespace }).uppercased()
            let rest = String(text.dropFirst(keyword.count)).trimmingCharacters(in: .whitespaces)
            let instruction = Instruction(keyword: keyword, arguments: rest, line: line)
            if keyword == "FROM" {
                if let done = current {
                    stages.append(Stage(image: done.image, imageAsWritten: done.written, name: done.name, instructions: done.instructions))
                }
                let words = rest.split(separator: " ").map(String.init).filter { !$0.hasPrefix("--") }
                guard let written = words.first else { throw TestHarnessError("line \(line): FROM without an image") }
                let name = words.count >= 3 && words[1].uppercased() == "AS" ? words[2] : nil
                current = (Self.substitute(written, arguments), written, name, [])
            } else if current == nil {
                guard keyword == "ARG" else { throw TestHarnessError("line \(line): \(keyword) before the first FROM") }
                let pair = rest.split(separator: "=", maxSplits: 1).map(String.init)
                arguments[pair[0]] = pair.count > 1 ? pair[1] : ""
            } else {
                current?.instructions.append(instruction)
            }
        }
        if let done = current {
            stages.append(Stage(image: done.image, imageAsWritten: done.written, name: done.name, instructions: done.instructions))
        }
        guard !stages.isEmpty else { throw TestHarnessError("no FROM instruction") }
        self.globalArguments = arguments
        self.stages = stages
    }

    public func stage(named name: String) -> Stage? { stages.first { $0.name == name } }

    /// `${NAME}` and `$NAME` replaced by the global ARG defaults.
    static func substitute(_ text: String, _ arguments: [String: String]) -> String {
        var out = text
        for (name, value) in arguments {
            out = out.replacingOccurrences(of: "${\(name)}", with: value).replacingOccurrences(of: "$\(name)", with: value)
        }
        return out
    }

    /// The exec-form (JSON array) command of `HEALTHCHECK … CMD [...]`, or nil for the shell form.
    public static func healthcheckCommand(_ instruction: Instruction) -> [String]? {
        guard let range = instruction.arguments.range(of: "CMD ") else { return nil }
        let json = instruction.arguments[range.upperBound...].trimmingCharacters(in: .whitespaces)
        return (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String]
    }
}

// MARK: - Shared libraries and Debian packages

/// Which Debian package each shared library of a binary comes from, and what a set of
/// packages pulls in, from `ldd`, `dpkg -S` and `apt-cache depends` (all offline).
public enum SharedLibraries {
    /// Every library `ldd` resolves for `binary` whose path does not contain `excluding` (the
    /// Swift toolchain's own runtime, `/lib/swift/linux/`), with the package that ships it.
    public static func packages(of binary: String, excluding: String = "/lib/swift/linux/") throws -> [(library: String, package: String)] {
        let ldd = try Tool.run("ldd", [binary])
        guard ldd.status == 0 else { throw TestHarnessError("ldd \(binary): \(ldd)") }
        var libraries: [String] = []
        for line in ldd.output.split(separator: "\n") {
            // "libpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
            let words = line.split(separator: " ").map(String.init).filter { !$0.isEmpty }
            let path: String?
            if let arrow = words.firstIndex(of: "=>"), arrow + 1 < words.count {
                path = words[arrow + 1].hasPrefix("/") ? words[arrow + 1] : nil
                if path == nil { throw TestHarnessError("ldd could not resolve \(words[0]) for \(binary)") }
            } else {
                path = words.first.flatMap { $0.hasPrefix("/") ? $0 : nil }  // the loader; vdso has no path
            }
            if let path, !path.contains(excluding) { libraries.append(path) }
        }
        // One dpkg query for every library, under each name it may be registered by (the path,
        // its symlink target, with and without the /usr prefix of the merged /usr).
        var variants: [String: [String]] = [:]
        for library in libraries {
            var names = [library]
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: library) {
                names.append(target.hasPrefix("/") ? target : (library as NSString).deletingLastPathComponent + "/" + target)
            }
            variants[library] = names.flatMap { [$0, $0.hasPrefix("/usr/") ? String($0.dropFirst(4)) : "/usr" + $0] }
        }
        let query = try Tool.run("dpkg", ["-S"] + Set(variants.values.joined()).sorted())
        var owners: [String: String] = [:]
        for line in query.output.split(separator: "\n") {
            // "libpq5:amd64: /usr/lib/x86_64-linux-gnu/libpq.so.5"
            guard let separator = line.range(of: ": /") else { continue }
            let package = line[..<separator.lowerBound].split(separator: ":").first.map(String.init) ?? ""
            let path = String(line[line.index(after: separator.lowerBound)...]).trimmingCharacters(in: .whitespaces)
            owners[path] = package
        }
        var found: [(String, String)] = []
        for library in libraries {
            guard let package = variants[library, default: []].lazy.compactMap({ owners[$0] }).first else {
                throw TestHarnessError("no Debian package ships \(library)")
            }
            found.append((library, package))
        }
        return found
    }

    /// `packages` and everything they depend on (Depends and Pre-Depends, recursively), as
    /// Debian says for the installed packages; virtual packages and alternatives included.
    public static func dependencyClosure(of packages: [String]) throws -> Set<String> {
        let answer = try Tool.run(
            "apt-cache",
            ["depends", "--recurse", "--installed", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
                + packages)
        guard answer.status == 0 else { throw TestHarnessError("apt-cache depends: \(answer)") }
        var closure = Set<String>()
        for line in answer.output.split(separator: "\n") where !line.hasPrefix(" ") {
            closure.insert(String(line).trimmingCharacters(in: CharacterSet(charactersIn: "<> ")).split(separator: ":").first.map(String.init) ?? "")
        }
        return closure
    }
}

// MARK: - The balancer examples

/// The deploy kit's balancer examples, made runnable on this machine by substituting only
/// addresses, ports and certificate paths. Each substitution must match exactly where
/// expected, so an edited example cannot silently escape the tests.
public enum BalancerExample {
    /// `deploy/nginx/parley.conf` with its upstream servers, listen address and certificate paths replaced.
    public static func nginx(example: String, instancePorts: [Int], listenPort: Int, certificate: String, key: String) throws -> String {
        var servers = 0
        var listens = 0
        var certificates = 0
        var keys = 0
        var accessLogs = 0
        let lines = example.components(separatedBy: "\n").map { line -> String in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            let indent = String(line.prefix { $0 == " " })
            if let match = trimmed.firstMatch(of: /^server\s+10\.0\.0\.\d+:8080(?<options>[^;]*);$/) {
                defer { servers += 1 }
                guard servers < instancePorts.count else { return line }
                return indent + "server 127.0.0.1:\(instancePorts[servers])\(match.options);"
            }
            if let match = trimmed.firstMatch(of: /^listen\s+443(?<options>\s[^;]*);$/) {
                listens += 1
                return indent + "listen 127.0.0.1:\(listenPort)\(match.options);"
            }
            if trimmed.hasPrefix("ssl_certificate ") {
                certificates += 1
                return indent + "ssl_certificate \(certificate);"
            }
            if trimmed.hasPrefix("ssl_certificate_key ") {
                keys += 1
                return indent + "ssl_certificate_key \(key);"
            }
            // The example's own log beside nginx's other files (the -p prefix), and the tests'
            // `balancer` log (nginxMain) too, which a server's access_log would otherwise replace.
            if let match = trimmed.firstMatch(of: /^access_log\s+\S+\s+(?<format>\S+);$/) {
                accessLogs += 1
                return indent + "access_log parley-access.log \(match.format); access_log access.log balancer;"
            }
            return line
        }
        // Two server blocks: Parley's own name and the web origin's (PARLEY_WEB_PUBLIC_URL).
        guard servers == instancePorts.count, listens == 2, certificates == 2, keys == 2, accessLogs == 2 else {
            throw TestHarnessError(
                "deploy/nginx/parley.conf no longer has the expected shape: \(servers) upstream servers (want \(instancePorts.count)), "
                    + "\(listens) listen 443, \(certificates) ssl_certificate, \(keys) ssl_certificate_key, \(accessLogs) access_log (want 2 each)")
        }
        return lines.joined(separator: "\n")
    }

    /// The main configuration around a conf.d snippet: what /etc/nginx/nginx.conf would hold, kept
    /// in `directory`, plus an access log that names the instance (and every retry) per request
    /// and, with `statusPort`, nginx's stub_status on 127.0.0.1 (requests in progress).
    public static func nginxMain(directory dir: String, snippetPath: String, statusPort: Int? = nil) -> String {
        let user = geteuid() == 0 ? "user root;\n" : ""
        let status = statusPort.map { "server { listen 127.0.0.1:\($0); access_log off; location = /status { stub_status; } }" } ?? ""
        return """
            \(user)worker_processes 1;
            error_log \(dir)/error.log notice;
            pid \(dir)/nginx.pid;
            events { worker_connections 1024; }
            http {
                log_format balancer '$request_method $request_uri $status upstream=$upstream_addr upstream_status=$upstream_status t=$msec';
                access_log \(dir)/access.log balancer;
                client_body_temp_path \(dir)/client_body;
                proxy_temp_path \(dir)/proxy;
                fastcgi_temp_path \(dir)/fastcgi;
                uwsgi_temp_path \(dir)/uwsgi;
                scgi_temp_path \(dir)/scgi;
                include \(snippetPath);
                \(status)
            }

            """
    }

    /// `deploy/haproxy/parley.cfg` with its certificate path (and, when given, bind port and servers) replaced.
    public static func haproxy(example: String, certificate: String, listenPort: Int? = nil, instancePorts: [Int]? = nil) throws -> String {
        var crts = 0
        var servers = 0
        let lines = example.components(separatedBy: "\n").map { line -> String in
            var line = line
            if let match = line.firstMatch(of: /crt\s+(?<path>\S+)/) {
                crts += 1
                line = line.replacingOccurrences(of: String(match.path), with: certificate)
                if let listenPort { line = line.replacingOccurrences(of: "bind :443", with: "bind 127.0.0.1:\(listenPort)") }
            }
            if let instancePorts, let match = line.firstMatch(of: /^(?<head>\s*server\s+\S+\s+)10\.0\.0\.\d+:8080/) {
                defer { servers += 1 }
                guard servers < instancePorts.count else { return line }
                line = String(match.head) + "127.0.0.1:\(instancePorts[servers])" + String(line[match.range.upperBound...])
            }
            return line
        }
        guard crts == 1, instancePorts == nil || servers == instancePorts?.count else {
            throw TestHarnessError("deploy/haproxy/parley.cfg no longer has the expected shape: \(crts) crt (want 1), \(servers) servers")
        }
        return lines.joined(separator: "\n")
    }
}

/// nginx running a configuration made from the deploy kit's example (`BalancerExample.nginx`),
/// everything (config, pid, logs, temp files) in a temp directory.
public final class ExampleNginx: Sendable {
    public let port: Int
    /// nginx's stub_status (test-only, outside the example), on 127.0.0.1.
    public let statusPort: Int
    public let directory: String
    private let process: Mutex<Process?>

    private init(port: Int, statusPort: Int, directory: String, process: Process) {
        self.port = port
        self.statusPort = statusPort
        self.directory = directory
        self.process = Mutex(process)
    }

    deinit { stop() }

    /// Writes the snippet and the main configuration, checks them with `nginx -t`, starts nginx
    /// and returns once it accepts connections on `port`.
    public static func start(snippet: String, port: Int, readyTimeout: Duration = .seconds(10)) async throws -> ExampleNginx {
        let dir = NSTemporaryDirectory() + "parley-balancer-" + UUID().uuidString
        for sub in ["", "/client_body", "/proxy", "/fastcgi", "/uwsgi", "/scgi"] {
            try FileManager.default.createDirectory(atPath: dir + sub, withIntermediateDirectories: true)
        }
        try snippet.write(toFile: dir + "/parley.conf", atomically: true, encoding: .utf8)
        let statusPort = try FreePort.find()
        try BalancerExample.nginxMain(directory: dir, snippetPath: dir + "/parley.conf", statusPort: statusPort)
            .write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        let arguments = ["-p", dir + "/", "-c", dir + "/nginx.conf", "-e", dir + "/error.log"]
        let check = try Tool.run("nginx", arguments + ["-t"])
        guard check.status == 0 else { throw TestHarnessError("nginx -t refused the example: \(check)") }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: try ExternalTool.locate("nginx"))
        process.arguments = arguments + ["-g", "daemon off;"]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let nginx = ExampleNginx(port: port, statusPort: statusPort, directory: dir, process: process)
        let deadline = ContinuousClock.now + readyTimeout
        while !FreePort.accepts(port) {
            if !process.isRunning || ContinuousClock.now > deadline {
                nginx.stop()
                throw TestHarnessError("nginx did not start on port \(port): \(nginx.errorLog.suffix(1500))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return nginx
    }

    /// Client requests nginx is working on now, the status request itself not counted.
    public func requestsInProgress() async throws -> Int {
        let status = try await RawHTTP.request(port: statusPort, method: "GET", target: "/status")
        // "Reading: 0 Writing: 4 Waiting: 2"
        guard let match = status.text.firstMatch(of: /Writing: (?<writing>\d+)/), let writing = Int(match.writing) else {
            throw TestHarnessError("nginx stub_status: \(status.status) \(status.text)")
        }
        return writing - 1
    }

    public var errorLog: String { (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? "" }

    /// One line per request: `METHOD target status upstream=addr[, addr…] upstream_status=… t=<end, Unix seconds>`.
    public var accessLog: [String] {
        ((try? String(contentsOfFile: directory + "/access.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The example's own access log (its `parley_paths` format), one line per request.
    public var exampleAccessLog: [String] {
        ((try? String(contentsOfFile: directory + "/parley-access.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Stops nginx (SIGTERM: a fast shutdown) and waits for it. Idempotent.
    public func stop() {
        guard let running = process.withLock({ $0.take() }) else { return }
        if running.isRunning { running.terminate() }
        running.waitUntilExit()
    }

    /// Stops nginx and deletes its directory.
    public func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// HAProxy running a configuration made from the deploy kit's example (`BalancerExample.haproxy`),
/// in the foreground, its configuration in a temp directory.
public final class ExampleHAProxy: Sendable {
    public let port: Int
    public let directory: String
    private let process: Mutex<Process?>
    private let output: String

    private init(port: Int, directory: String, process: Process, output: String) {
        self.port = port
        self.directory = directory
        self.process = Mutex(process)
        self.output = output
    }

    deinit { stop() }

    /// Checks the configuration with `haproxy -c`, starts HAProxy and returns once it accepts connections.
    public static func start(configuration: String, port: Int, readyTimeout: Duration = .seconds(10)) async throws -> ExampleHAProxy {
        let dir = NSTemporaryDirectory() + "parley-haproxy-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try configuration.write(toFile: dir + "/parley.cfg", atomically: true, encoding: .utf8)
        let check = try Tool.run("haproxy", ["-c", "-f", dir + "/parley.cfg"])
        guard check.status == 0 else { throw TestHarnessError("haproxy -c refused the example: \(check)") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try ExternalTool.locate("haproxy"))
        process.arguments = ["-db", "-f", dir + "/parley.cfg"]
        let outputPath = dir + "/haproxy.log"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        try? output.close()
        let haproxy = ExampleHAProxy(port: port, directory: dir, process: process, output: outputPath)
        let deadline = ContinuousClock.now + readyTimeout
        while !FreePort.accepts(port) {
            if !process.isRunning || ContinuousClock.now > deadline {
                haproxy.stop()
                throw TestHarnessError("haproxy did not start on port \(port): \(haproxy.log.suffix(1500))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return haproxy
    }

    /// HAProxy's own log (stdout): one line per request, health-check transitions.
    public var log: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

    public func stop() {
        guard let running = process.withLock({ $0.take() }) else { return }
        if running.isRunning { running.terminate() }
        running.waitUntilExit()
    }

    public func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
