import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// Why a test helper could not set something up. Carries command names and log tails,
/// never key material or passwords.
public struct TestHarnessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

enum ExternalTool {
    /// The first executable named `name` in `$PATH` or the usual system directories.
    static func locate(_ name: String) throws -> String {
        if name.hasPrefix("/") {
            guard FileManager.default.isExecutableFile(atPath: name) else { throw TestHarnessError("\(name) is not executable") }
            return name
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"]
        for directory in directories {
            let candidate = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw TestHarnessError("\(name) not found on PATH")
    }

    /// Runs a tool to completion; stderr goes into the error when it fails.
    static func run(_ tool: String, _ arguments: [String], in directory: String, environment: [String: String] = [:]) throws {
        let process = Process()
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        process.executableURL = URL(fileURLWithPath: try locate(tool))
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = String(decoding: output, as: UTF8.self)
            throw TestHarnessError("\(tool) \(arguments.first ?? "") failed (\(process.terminationStatus)): \(text.suffix(800))")
        }
    }
}

/// Runs another implementation's checker to completion (`PATH` or the system directories);
/// throws with its stderr when it fails.
public enum ExternalCheck {
    public static func run(_ tool: String, _ arguments: [String], in directory: String? = nil) throws {
        try ExternalTool.run(tool, arguments, in: directory ?? NSTemporaryDirectory())
    }
}

public enum FreePort {
    /// A TCP port on 127.0.0.1 that was free a moment ago: bound to port 0, read, released.
    public static func find() throws -> Int {
        #if canImport(Darwin)
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { throw TestHarnessError("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw TestHarnessError("bind() failed: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw TestHarnessError("getsockname() failed: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    static func accepts(_ port: Int) -> Bool {
        #if canImport(Darwin)
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return rc == 0
    }
}

/// Runs commands that leave daemons behind (PostgreSQL's `pg_ctl start`, test fixtures).
public enum Spawn {
    /// Runs `argv` with stdin from /dev/null and stdout and stderr into `output` (or nowhere).
    /// `posix_spawn` and `waitpid`; returns the exit status (or 128 + signal).
    ///
    /// Not Foundation's `Process`: on Linux it notices a child's exit when a socket it hands the
    /// child closes, and a daemon it starts (`pg_ctl start`'s postmaster, a test fixture's servers) keeps it
    /// open for its whole life — the command then never "ends". Here the child gets only
    /// stdin (/dev/null), stdout and stderr; every other descriptor is closed.
    public static func runAndWait(_ argv: [String], output: String?, directory: String? = nil) throws -> Int32 {
        guard let executable = argv.first else { throw TestHarnessError("nothing to run") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        if let closeFrom = SpawnExtensions.addCloseFrom {
            _ = closeFrom(&actions, 3)
        } else {
            // Older C libraries: close what is open now (descriptors opened meanwhile by other
            // threads may leak, which only matters for ones without FD_CLOEXEC).
            let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            for fd in open.compactMap(Int32.init) where fd > 2 {
                posix_spawn_file_actions_addclose(&actions, fd)
            }
        }
        if let directory, let chdir = SpawnExtensions.addChdir {
            _ = chdir(&actions, directory)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var cArguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, &cArguments, environ)
        guard spawned == 0 else {
            throw TestHarnessError("cannot run \(argv.first ?? "?"): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw TestHarnessError("waitpid failed for \(argv.first ?? "?")") }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

}

private enum SpawnExtensions {
    typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    typealias Chdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    static let addCloseFrom: CloseFrom? = lookup("posix_spawn_file_actions_addclosefrom_np")
    static let addChdir: Chdir? = lookup("posix_spawn_file_actions_addchdir_np")

    private static func lookup<F>(_ name: String) -> F? {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(symbol, to: F.self)
    }
}
