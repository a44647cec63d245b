public import Foundation

/// The committed inputs of a target under `Tests/Fuzz`: `corpus/<target>/` holds small
/// seeds, `regressions/<target>/` every input that once crashed or broke an invariant.
/// Both are replayed by `swift test` (`FuzzRegressionTests`) and by `parley-fuzz` built
/// without the fuzzer.
public enum FuzzCorpus {
    public static let kinds = ["corpus", "regressions"]

    /// Files (not directories, not hidden), sorted by path.
    public static func files(for target: FuzzTarget, under root: URL) -> [URL] {
        kinds.flatMap { files(in: root.appendingPathComponent($0).appendingPathComponent(target.rawValue)) }
    }

    /// The files of a folder, or the path itself when it is a file.
    public static func files(in location: URL) -> [URL] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: location.path, isDirectory: &isDirectory) else { return [] }
        guard isDirectory.boolValue else { return [location] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: location.path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { location.appendingPathComponent($0) }
            .filter { url in
                var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) && !isDirectory.boolValue
            }
    }
}
