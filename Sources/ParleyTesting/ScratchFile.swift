import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Small files a test hands to a child process by path (a destinations file, say): written into
/// one directory of this test process, which is removed when the process exits, so no run
/// leaves files behind in the temporary directory.
public enum ScratchFile {
    /// Writes `text` to a new file whose name ends in `suffix` and returns its path.
    public static func write(_ text: String, suffix: String) throws -> String {
        let path = try directory.get() + "/" + UUID().uuidString + suffix
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// The folder's path; the exit handler (which cannot capture) reads it from here.
    private static let path = NSTemporaryDirectory() + "parley-scratch-\(getpid())"

    private static let directory: Result<String, any Error> = {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            return .failure(TestHarnessError("cannot create \(path): \(error)"))
        }
        atexit { try? FileManager.default.removeItem(atPath: ScratchFile.path) }
        return .success(path)
    }()
}
