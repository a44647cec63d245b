import Foundation

/// A TCP socket bound to 127.0.0.1 on a port the kernel picks, closed when released.
///
/// `listening: false` only reserves a number (`PostgresServer` uses it to find a free port);
/// `listening: true` accepts connections — the kernel completes the handshake — but nobody ever
/// reads or answers: what a hung or black-holed server looks like to a client.
public final class LoopbackSocket: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let port: Int
    private let fd: Int32

    public init(listening: Bool) throws {
        (fd, port) = try Self.bindLoopback(backlog: listening ? 64 : nil)
    }

    /// A TCP socket bound to 127.0.0.1 on a port the kernel picks, listening when a
    /// `backlog` is given; its descriptor and port. Nothing is left open on failure.
    public static func bindLoopback(backlog: Int32?, reuseAddress: Bool = false) throws -> (fd: Int32, port: Int) {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure(description: "cannot create a socket") }
        if reuseAddress {
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, named == 0, backlog.map({ listen(fd, $0) == 0 }) ?? true else {
            close(fd)
            throw Failure(description: "cannot bind a socket to 127.0.0.1")
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    deinit { close(fd) }
}
