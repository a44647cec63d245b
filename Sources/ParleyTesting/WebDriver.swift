import Foundation
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// A WebDriver failure: chromedriver or Chromium missing, a command refused, a wait that ran out.
public struct WebDriverError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) { self.description = description }
}

/// `/usr/bin/chromedriver` as a child process on a free port of 127.0.0.1, driving headless
/// Chromium through the W3C WebDriver protocol. Start it, open sessions, `stop()` it.
///
/// ```swift
/// try await ChromeDriver.withSession { browser in
///     try await browser.navigate(to: url)
///     try await browser.click(try await browser.findElement(css: "#login"))
/// }
/// ```
public final class ChromeDriver: Sendable {
    public static let defaultDriverPath = "/usr/bin/chromedriver"
    public static let defaultBrowserPath = "/usr/bin/chromium"
    /// Headless, and runnable as root in a container.
    public static let defaultBrowserArguments = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]

    public let port: Int
    private let process: Process

    private init(port: Int, process: Process) {
        self.port = port
        self.process = process
    }

    /// Runs chromedriver on a free port and waits (bounded) until `GET /status` says ready.
    public static func start(driverPath: String = defaultDriverPath, timeout: Duration = .seconds(20)) async throws -> ChromeDriver {
        try requireExecutable(driverPath, what: "chromedriver")
        let port = try FreePort.find()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: driverPath)
        process.arguments = ["--port=\(port)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw WebDriverError("cannot start \(driverPath): \(error)")
        }
        let driver = ChromeDriver(port: port, process: process)
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while true {
            guard process.isRunning else {
                throw WebDriverError("chromedriver exited with status \(process.terminationStatus) before it was ready")
            }
            if let status = try? await driver.command("GET", "/status", timeout: 2),
                let value = status["value"] as? [String: Any], value["ready"] as? Bool == true
            {
                return driver
            }
            guard ContinuousClock.now < deadline else {
                await driver.stop()
                throw WebDriverError("chromedriver on port \(port) was not ready within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Opens a browser: headless Chromium at `browserPath` with `arguments`.
    public func newSession(
        browserPath: String = defaultBrowserPath, arguments: [String] = defaultBrowserArguments
    ) async throws -> WebDriverSession {
        try Self.requireExecutable(browserPath, what: "Chromium")
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "goog:chromeOptions": ["binary": browserPath, "args": arguments],
                    // Finding an element waits (up to 10 s) for it to appear: after a click or a
                    // redirect the next page may still be loading when the next command arrives.
                    "timeouts": ["implicit": 10_000, "pageLoad": 60_000],
                ] as [String: Any]
            ]
        ]
        let answer = try await command("POST", "/session", capabilities, timeout: 60)
        guard let value = answer["value"] as? [String: Any], let id = value["sessionId"] as? String else {
            throw WebDriverError("new session: no sessionId in the answer")
        }
        return WebDriverSession(id: id, driver: self)
    }

    /// Ends chromedriver (SIGTERM, then SIGKILL after a few seconds). Idempotent.
    public func stop() async {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while process.isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Starts chromedriver and a browser for the duration of `body`, then quits and stops both.
    public static func withSession<T>(
        driverPath: String = defaultDriverPath, browserPath: String = defaultBrowserPath,
        arguments: [String] = defaultBrowserArguments,
        _ body: (WebDriverSession) async throws -> T
    ) async throws -> T {
        let driver = try await start(driverPath: driverPath)
        do {
            let session = try await driver.newSession(browserPath: browserPath, arguments: arguments)
            do {
                let result = try await body(session)
                try? await session.quit()
                await driver.stop()
                return result
            } catch {
                try? await session.quit()
                throw error
            }
        } catch {
            await driver.stop()
            throw error
        }
    }

    static func requireExecutable(_ path: String, what: String) throws {
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw WebDriverError("\(what) not found at \(path): run scripts/install-deps.sh --test")
        }
    }

    /// One WebDriver command; the answer's JSON object, or an error naming the WebDriver error.
    func command(_ method: String, _ path: String, _ body: [String: Any]? = nil, timeout: Int = 30) async throws -> [String: Any] {
        var bytes: [UInt8] = []
        if let body { bytes = Array(try JSONSerialization.data(withJSONObject: body)) }
        let response = try await WebDriverHTTP.request(port: port, method: method, path: path, body: bytes, timeout: timeout)
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        guard (200..<300).contains(response.status) else {
            let value = json["value"] as? [String: Any]
            let error = value?["error"] as? String ?? "HTTP \(response.status)"
            let message = (value?["message"] as? String).map { $0.split(separator: "\n").first.map(String.init) ?? $0 } ?? ""
            throw WebDriverError("\(method) \(path): \(error) \(message)")
        }
        return json
    }
}

/// An element found by a session; opaque outside WebDriver.
public struct WebElement: Sendable, Equatable {
    /// The W3C element reference key.
    static let key = "element-6066-11e4-a52e-4f735466cecf"

    public let id: String
}

/// One browser opened by `ChromeDriver.newSession()`.
public struct WebDriverSession: Sendable {
    public let id: String
    let driver: ChromeDriver

    public func navigate(to url: String) async throws {
        _ = try await driver.command("POST", "/session/\(id)/url", ["url": url], timeout: 60)
    }

    public func currentURL() async throws -> String {
        try await value(of: driver.command("GET", "/session/\(id)/url"), as: String.self)
    }

    public func pageSource() async throws -> String {
        try await value(of: driver.command("GET", "/session/\(id)/source"), as: String.self)
    }

    public func findElement(css selector: String) async throws -> WebElement {
        let answer = try await driver.command("POST", "/session/\(id)/element", ["using": "css selector", "value": selector])
        let reference = try value(of: answer, as: [String: Any].self)
        guard let element = reference[WebElement.key] as? String else {
            throw WebDriverError("find \(selector): no element reference in the answer")
        }
        return WebElement(id: element)
    }

    public func sendKeys(_ text: String, to element: WebElement) async throws {
        _ = try await driver.command("POST", "/session/\(id)/element/\(element.id)/value", ["text": text])
    }

    public func click(_ element: WebElement) async throws {
        _ = try await driver.command("POST", "/session/\(id)/element/\(element.id)/click", [:], timeout: 60)
    }

    /// Polls the browser's URL until it starts with `prefix` (the browser's state is outside
    /// this process, so there is nothing to await); returns it, or fails after `timeout`.
    @discardableResult
    public func waitForURL(prefix: String, timeout: Duration = .seconds(15)) async throws -> String {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var last = ""
        while true {
            last = try await currentURL()
            if last.hasPrefix(prefix) { return last }
            guard ContinuousClock.now < deadline else {
                throw WebDriverError("the browser did not reach \(prefix) within \(timeout); it is at \(last)")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Runs `body` in the page as the body of an async function and answers what it returns,
    /// as JSON text (`JSON.stringify`); a thrown error (or a rejected promise) is a
    /// `WebDriverError` with its message. WebDriver's script timeout (30 s) bounds it.
    public func evaluate(_ body: String) async throws -> String {
        let script = """
            const done = arguments[arguments.length - 1];
            (async () => { \(body) })().then(
              (value) => done({ ok: JSON.stringify(value === undefined ? null : value) }),
              (error) => done({ error: String(error && error.message || error) }));
            """
        let answer = try await driver.command("POST", "/session/\(id)/execute/async", ["script": script, "args": [Any]()], timeout: 60)
        let result = try value(of: answer, as: [String: Any].self)
        if let error = result["error"] as? String { throw WebDriverError("script: \(error)") }
        guard let json = result["ok"] as? String else { throw WebDriverError("script: no result") }
        return json
    }

    /// A PNG of the viewport.
    public func screenshotPNG() async throws -> [UInt8] {
        let encoded = try await value(of: driver.command("GET", "/session/\(id)/screenshot"), as: String.self)
        guard let data = Data(base64Encoded: encoded) else { throw WebDriverError("screenshot: not base64") }
        return Array(data)
    }

    /// Closes the browser.
    public func quit() async throws {
        _ = try await driver.command("DELETE", "/session/\(id)")
    }

    private func value<T>(of answer: [String: Any], as type: T.Type) throws -> T {
        guard let value = answer["value"] as? T else { throw WebDriverError("unexpected answer: no \(T.self) value") }
        return value
    }
}

/// A blocking HTTP/1.1 exchange with chromedriver on NIO's thread pool. Unlike `RawHTTP`,
/// it reads exactly `Content-Length` bytes: chromedriver keeps connections open.
enum WebDriverHTTP {
    struct Response {
        let status: Int
        let body: [UInt8]
    }

    static func request(port: Int, method: String, path: String, body: [UInt8], timeout: Int) async throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        head += "Accept: application/json\r\n"
        if method != "GET" && method != "DELETE" || !body.isEmpty {
            head += "Content-Type: application/json; charset=utf-8\r\nContent-Length: \(body.count)\r\n"
        }
        let bytes = Array((head + "\r\n").utf8) + body
        return try await runOnOwnThread { try exchange(port: port, bytes: bytes, timeout: timeout) }
    }

    /// chromedriver keeps connections open, so the shared client's read stops at Content-Length.
    private static func exchange(port: Int, bytes: [UInt8], timeout: Int) throws -> Response {
        let received: [UInt8]
        do { received = try RawHTTP.exchange(port: port, bytes: bytes, timeout: timeout) } catch {
            throw WebDriverError("no answer from chromedriver on 127.0.0.1:\(port): \(error)")
        }
        guard let parsed = try? RawHTTP.parse(received) else { throw WebDriverError("incomplete answer from chromedriver") }
        return Response(status: parsed.status, body: parsed.body)
    }
}
