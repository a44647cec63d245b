public import Foundation
import Synchronization

/// The real `parley` binary as a child process, for live tests: started with an
/// environment, considered ready when it logs "parley ready", stopped with a signal.
public final class ParleyProcess: Sendable {
    public let port: Int
    public let process: Process
    private let output: OutputCollector

    /// Where the binary is: `PARLEY_BINARY`, else `.build/debug/parley` under the package.
    public static func binaryPath(_ name: String = "parley", variable: String = "PARLEY_BINARY") -> String {
        if let path = ProcessInfo.processInfo.environment[variable], !path.isEmpty { return path }
        return FileManager.default.currentDirectoryPath + "/.build/debug/" + name
    }

    /// Starts `parley <arguments>` and waits (bounded) for its ready line. Another server a
    /// test runs the same way (a fixture under `binary`) names its own `readyLine`.
    public static func start(
        arguments: [String] = ["serve"], environment: [String: String], port: Int? = nil, waitForReady: Bool = true,
        binary: String? = nil, workingDirectory: String? = nil, readyLine: String = "parley ready"
    ) async throws -> ParleyProcess {
        let port = try port ?? FreePort.find()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary ?? binaryPath())
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        process.arguments = arguments
        var env = environment
        env["PARLEY_LISTEN"] = "127.0.0.1:\(port)"
        env["PATH"] = ProcessInfo.processInfo.environment["PATH"]
        process.environment = env
        let collector = OutputCollector()
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = pipe
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                collector.outputClosed()
            } else {
                collector.append(data)
            }
        }
        process.terminationHandler = { _ in collector.processTerminated() }
        try process.run()
        let parley = ParleyProcess(port: port, process: process, output: collector)
        if waitForReady { try await parley.waitForOutput(readyLine, timeout: .seconds(30)) }
        return parley
    }

    private init(port: Int, process: Process, output: OutputCollector) {
        self.port = port
        self.process = process
        self.output = output
    }

    /// A test that failed half-way must not leave a server behind.
    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Everything the process wrote so far (stdout and stderr).
    public var log: String { output.text }

    /// Waits until the process printed `text`, or fails after `timeout` (or when it exits).
    public func waitForOutput(_ text: String, timeout: Duration) async throws {
        try await output.wait(for: text, timeout: timeout)
    }

    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for the process to exit and returns its status.
    public func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        await output.waitUntil(nil, timeout: timeout)
        guard !process.isRunning else { throw RawHTTPError(description: "parley did not exit in time") }
        process.waitUntilExit()
        return process.terminationStatus
    }

    public func stop() async {
        guard process.isRunning else { return }
        signal(SIGTERM)
        if (try? await waitForExit(timeout: .seconds(10))) == nil { signal(SIGKILL) }
    }
}

/// Collects a child's output and wakes waiters when a text appears or the child ends.
final class OutputCollector: Sendable {
    private struct State {
        var text = ""
        var terminated = false
        var closed = false
        /// Done only when the child exited and its output was read to the end: its last
        /// lines may still sit in the pipe when the exit is noticed.
        var exited: Bool { terminated && closed }
        /// A nil needle waits for the child's exit only.
        var waiters: [Int: (needle: String?, continuation: CheckedContinuation<Void, Never>)] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    func append(_ data: Data) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.text += String(decoding: data, as: UTF8.self)
            let text = state.text
            let done = state.waiters.filter { $0.value.needle.map(text.contains) ?? false }
            for id in done.keys { state.waiters[id] = nil }
            return done.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    /// The exit is noticed; the output's end usually follows at once, but Foundation does not
    /// always report it, so it is awaited for at most a second.
    func processTerminated() {
        settle { $0.terminated = true }
        Task {
            try? await Task.sleep(for: .seconds(1))
            self.outputClosed()
        }
    }

    func outputClosed() { settle { $0.closed = true } }

    /// Once the child exited and its output ended, nobody waits for more.
    private func settle(_ change: (inout State) -> Void) {
        let all = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            change(&state)
            guard state.exited else { return [] }
            defer { state.waiters = [:] }
            return state.waiters.values.map(\.continuation)
        }
        for continuation in all { continuation.resume() }
    }

    var text: String { state.withLock { $0.text } }

    /// Returns when `needle` appeared (nil: never), the child exited, or the task was cancelled.
    private func waitUntil(_ needle: String?) async {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state -> Bool in
                    if needle.map(state.text.contains) == true || state.exited || Task.isCancelled { return true }
                    state.waiters[id] = (needle, continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume()
        }
    }

    /// Waits (bounded) for `needle`, or with nil for the child's exit.
    func waitUntil(_ needle: String?, timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitUntil(needle) }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    func wait(for needle: String, timeout: Duration) async throws {
        await waitUntil(needle, timeout: timeout)
        if !text.contains(needle) {
            throw RawHTTPError(description: "'\(needle)' did not appear in time; output so far:\n\(text.suffix(3000))")
        }
    }
}
