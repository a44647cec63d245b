import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// nginx terminating TLS on a free 127.0.0.1 port, requiring a client certificate from
/// the test CA, and proxying to a plain-HTTP upstream: "the SMP's HTTPS port".
///
/// A client without a valid certificate gets no HTTP answer: nginx's 495/496 are turned
/// into `return 444` (close the connection), which is what a server that rejects the
/// handshake looks like to the client. The upstream sees `X-Client-Verify` and
/// `X-Client-Subject` headers.
///
/// Everything nginx writes (config, pid, error log, temp files) stays in `directory`.
public final class TLSFrontend: Sendable {
    public let port: Int
    public let directory: String
    private let process: Mutex<Process?>

    /// `https://localhost:PORT` — the name on the server certificate.
    public var baseURL: String { "https://localhost:\(port)" }

    public var errorLogPath: String { directory + "/error.log" }

    private init(port: Int, directory: String, process: Process) {
        self.port = port
        self.directory = directory
        self.process = Mutex(process)
    }

    deinit { stop() }

    /// Starts nginx and returns once it accepts connections (or throws with its error log).
    public static func start(
        certificates: TestCertificates, upstreamPort: Int, upstreamHost: String = "127.0.0.1",
        readyTimeout: Duration = .seconds(10)
    ) async throws -> TLSFrontend {
        let dir = NSTemporaryDirectory() + "parley-nginx-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for sub in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        let port = try FreePort.find()
        let config = configuration(
            directory: dir, port: port, certificates: certificates, upstream: "\(upstreamHost):\(upstreamPort)")
        try config.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: try ExternalTool.locate("nginx"))
        process.arguments = [
            "-p", dir + "/", "-c", dir + "/nginx.conf", "-e", dir + "/error.log",
            "-g", "daemon off; pid \(dir)/nginx.pid;",
        ]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        _ = FileManager.default.createFile(atPath: dir + "/nginx.out", contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: dir + "/nginx.out"))
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        try? output.close()
        let frontend = TLSFrontend(port: port, directory: dir, process: process)

        // Readiness: poll until the port accepts connections, nginx exits, or time runs out.
        let clock = ContinuousClock()
        let deadline = clock.now + readyTimeout
        while !FreePort.accepts(port) {
            if !process.isRunning || clock.now > deadline {
                let log = frontend.logTail()
                frontend.stop()
                throw TestHarnessError("nginx did not start on port \(port): \(log)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return frontend
    }

    /// Stops nginx (SIGTERM, then waits). Idempotent. Leaves `directory` for post-mortems;
    /// `remove()` deletes it.
    public func stop() {
        guard let running = process.withLock({ $0.take() }) else { return }
        if running.isRunning {
            running.terminate()
        }
        running.waitUntilExit()
    }

    /// Stops nginx and deletes its directory.
    public func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The end of nginx's error log and console output.
    public func logTail() -> String {
        let paths = [errorLogPath, directory + "/nginx.out"]
        return paths.map { path in
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return String(text.suffix(1500))
        }.joined(separator: "\n")
    }

    static func configuration(directory dir: String, port: Int, certificates: TestCertificates, upstream: String) -> String {
        // Root would hand the workers to "nobody"; keep them as the current user.
        let user = geteuid() == 0 ? "user root;\n" : ""
        return """
            \(user)worker_processes 1;
            error_log \(dir)/error.log notice;
            events { worker_connections 512; }
            http {
                access_log off;
                client_body_temp_path \(dir)/client_body;
                proxy_temp_path \(dir)/proxy;
                fastcgi_temp_path \(dir)/fastcgi;
                uwsgi_temp_path \(dir)/uwsgi;
                scgi_temp_path \(dir)/scgi;
                client_max_body_size 0;

                server {
                    listen 127.0.0.1:\(port) ssl;
                    server_name localhost;
                    ssl_certificate \(certificates.serverCertificatePath);
                    ssl_certificate_key \(certificates.serverKeyPath);
                    ssl_client_certificate \(certificates.caCertificatePath);
                    ssl_verify_client on;
                    ssl_verify_depth 2;

                    error_page 495 496 = @refused;
                    location @refused { return 444; }

                    location / {
                        proxy_pass http://\(upstream);
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_set_header Host $http_host;
                        proxy_set_header X-Client-Verify $ssl_client_verify;
                        proxy_set_header X-Client-Subject $ssl_client_s_dn;
                        proxy_request_buffering off;
                        proxy_buffering off;
                        proxy_read_timeout 1h;
                        proxy_send_timeout 1h;
                    }
                }
            }

            """
    }
}
