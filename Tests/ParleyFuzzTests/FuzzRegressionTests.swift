import Foundation
import ParleyFuzzTargets
import Testing

/// Every committed fuzz input (seeds, and the inputs that once crashed or broke an
/// invariant: `Tests/Fuzz`) goes through its target again, so what was fixed stays fixed.
/// Each target replays in a child process (an exit test): an input that still traps fails
/// this test and is named, instead of ending the whole test run.
@Suite struct FuzzRegressionTests {
    @Test(arguments: FuzzTarget.allCases)
    func committedInputsKeepTheirInvariants(_ target: FuzzTarget) async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz")
        let files = FuzzCorpus.files(for: target, under: root).map(\.path)
        #expect(!files.isEmpty, "no seeds under Tests/Fuzz/corpus/\(target.rawValue)")
        let passed = await #expect(processExitsWith: .success) { [target = target as FuzzTarget, files = files as [String]] in
            Self.replay(target, files)
        }
        guard passed == nil else { return }
        // A failed exit test returns no output: run it once more, expecting the failure, to name the input.
        let failure = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            [target = target as FuzzTarget, files = files as [String]] in
            Self.replay(target, files)
        }
        let lines = String(decoding: failure?.standardErrorContent ?? [], as: UTF8.self).split(separator: "\n")
        let broken = lines.filter { $0.hasPrefix("broken ") }
        let crashed = lines.last { $0.hasPrefix("replaying ") }.map { "crashed " + $0 }
        Issue.record("\(target.rawValue): \(broken.isEmpty ? crashed ?? "no output" : broken.joined(separator: "\n"))")
    }

    static func replay(_ target: FuzzTarget, _ files: [String]) -> Never {
        var failed = false
        for path in files {
            FileHandle.standardError.write(Data("replaying \(path)\n".utf8))
            let broken = target.run(Array(FileManager.default.contents(atPath: path) ?? Data()))
            if !broken.isEmpty {
                FileHandle.standardError.write(Data("broken \(path): \(broken.joined(separator: "; "))\n".utf8))
                failed = true
            }
        }
        exit(failed ? 1 : 0)
    }
}
