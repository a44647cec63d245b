import ParleyEncoding
import Conversation
import Foundation
import NIOCore
import NIOPosix
import ParleyCrypto

#if canImport(Glibc)
import Glibc
#endif

/// A proxied request body made replayable: kept in memory up to a limit, then in a
/// spool file (mode 0600) that `remove()` deletes. File writes run on NIO's
/// blocking thread pool, never on an event loop.
struct SpooledBody: Sendable {
    let body: RequestBody
    private let path: String?

    init(body: RequestBody, path: String?) {
        self.body = body
        self.path = path
    }

    /// Deletes the spool file, if any. Safe to call more than once.
    func remove() {
        if let path { unlink(path) }
    }

    /// Reads `source` whole. Throws `Problem` 413 past `limit` bytes; cleans up on every failure.
    static func read<S: AsyncSequence>(
        _ source: S, limit: Int64, memoryLimit: Int, directory: String
    ) async throws -> SpooledBody where S.Element == ByteBuffer {
        var memory: [UInt8] = []
        var file: SpoolFile?
        var total: Int64 = 0
        var pending: [UInt8] = []
        do {
            for try await buffer in source {
                total += Int64(buffer.readableBytes)
                guard total <= limit else {
                    throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
                }
                if let open = file {
                    pending.append(contentsOf: buffer.readableBytesView)
                    if pending.count >= 256 * 1024 {
                        try await open.write(pending)
                        pending.removeAll(keepingCapacity: true)
                    }
                } else if memory.count + buffer.readableBytes <= memoryLimit {
                    memory.append(contentsOf: buffer.readableBytesView)
                } else {
                    let created = try await SpoolFile.create(in: directory)
                    file = created
                    pending = memory
                    pending.append(contentsOf: buffer.readableBytesView)
                    memory = []
                }
            }
            if let open = file {
                if !pending.isEmpty { try await open.write(pending) }
                try await open.close()
                return SpooledBody(body: .file(path: open.path, length: total), path: open.path)
            }
            return SpooledBody(body: memory.isEmpty ? .empty : .bytes(memory), path: nil)
        } catch {
            if let file {
                try? await file.close()
                unlink(file.path)
            }
            throw error
        }
    }
}

/// One spool file being written; its descriptor is closed exactly once.
final class SpoolFile: Sendable {
    let path: String
    private let fd: Int32

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    static func create(in directory: String) async throws -> SpoolFile {
        let path = directory + (directory.hasSuffix("/") ? "" : "/") + "parley-body-" + Hex.encode(SecureRandom.bytes(12))
        let fd = try await NIOThreadPool.singleton.runIfActive { open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw Problem(.internalServerError, .internalError, "cannot create a spool file for the request body") }
        return SpoolFile(path: path, fd: fd)
    }

    func write(_ bytes: [UInt8]) async throws {
        let fd = self.fd
        let ok = try await NIOThreadPool.singleton.runIfActive {
            bytes.withUnsafeBytes { buffer -> Bool in
                var offset = 0
                while offset < buffer.count {
                    let n = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if n < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    offset += n
                }
                return true
            }
        }
        guard ok else { throw Problem(.internalServerError, .internalError, "cannot write the request body spool file") }
    }

    func close() async throws {
        let fd = self.fd
        _ = try await NIOThreadPool.singleton.runIfActive { Glibc.close(fd) }
    }
}
