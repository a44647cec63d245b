import Foundation
import ParleyFuzzTargets

#if PARLEY_FUZZ
import CParleyFuzz
#endif

/// `parley-fuzz`, two binaries from one source (docs/fuzzing.md):
///
/// - built normally, it replays committed inputs: `parley-fuzz` replays `Tests/Fuzz`
///   (or `$PARLEY_FUZZ_ROOT`) for every target; `parley-fuzz <target> <file|folder>…`
///   replays the given inputs, a crash showing Swift's backtrace;
/// - built by `scripts/fuzz.sh` (`-sanitize=fuzzer -DPARLEY_FUZZ`), it is libFuzzer:
///   `parley-fuzz <target> [libFuzzer flags] [corpus folders]`. The target may also come
///   from `PARLEY_FUZZ_TARGET` (libFuzzer's `-fork` re-runs the binary without it).
@main
struct FuzzCommand {
    static func main() {
        var arguments = CommandLine.arguments
        var target: FuzzTarget?
        if arguments.count > 1, let named = FuzzTarget(rawValue: arguments[1]) {
            target = named
            arguments.remove(at: 1)
        } else if let named = ProcessInfo.processInfo.environment["PARLEY_FUZZ_TARGET"] {
            guard let known = FuzzTarget(rawValue: named) else { usage("unknown target '\(named)'") }
            target = known
        }
        #if PARLEY_FUZZ
        guard let target else { usage("name a target") }
        exit(fuzz(target, arguments: arguments))
        #else
        if let target {
            exit(replay(target, arguments.dropFirst().map { URL(fileURLWithPath: $0) }))
        }
        guard arguments.count == 1 else { usage("unknown target '\(arguments[1])'") }
        let root = URL(fileURLWithPath: ProcessInfo.processInfo.environment["PARLEY_FUZZ_ROOT"] ?? "Tests/Fuzz")
        var status: Int32 = 0
        for target in FuzzTarget.allCases {
            status = max(status, replay(target, FuzzCorpus.kinds.map { root.appendingPathComponent($0).appendingPathComponent(target.rawValue) }))
        }
        exit(status)
        #endif
    }

    static func usage(_ problem: String) -> Never {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
        FileHandle.standardError.write(Data("parley-fuzz: \(problem)\nusage: parley-fuzz [\(names)] [inputs or libFuzzer flags]\n".utf8))
        exit(2)
    }

    /// Runs every file; 1 when an input broke an invariant.
    static func replay(_ target: FuzzTarget, _ locations: [URL]) -> Int32 {
        var inputs = 0
        var failures = 0
        for file in locations.flatMap(FuzzCorpus.files(in:)) {
            guard let data = FileManager.default.contents(atPath: file.path) else { continue }
            inputs += 1
            let broken = target.run(Array(data))
            if !broken.isEmpty {
                failures += 1
                print("\(target.rawValue): \(file.path): \(broken.joined(separator: "; "))")
            }
        }
        print("\(target.rawValue): \(inputs) inputs replayed, \(failures) broke an invariant")
        return failures == 0 ? 0 : 1
    }

    #if PARLEY_FUZZ
    /// Hands the process to libFuzzer's driver with the target's callback; the callbacks
    /// are C functions, so each target has its own non-capturing closure.
    static func fuzz(_ target: FuzzTarget, arguments: [String]) -> Int32 {
        typealias Callback = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
        let callback: Callback =
            switch target {
            case .responseHead: { fuzzOne(.responseHead, $0, $1) }
            case .setCookie: { fuzzOne(.setCookie, $0, $1) }
            case .tokenResponse: { fuzzOne(.tokenResponse, $0, $1) }
            case .proxyPath: { fuzzOne(.proxyPath, $0, $1) }
            case .destinations: { fuzzOne(.destinations, $0, $1) }
            case .callbackQuery: { fuzzOne(.callbackQuery, $0, $1) }
            case .samlResponse: { fuzzOne(.samlResponse, $0, $1) }
            case .userinfo: { fuzzOne(.userinfo, $0, $1) }
            }
        // libFuzzer keeps argv for the life of the process: copies that are never freed.
        var argc = Int32(arguments.count)
        let vector = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: arguments.count + 1)
        for (index, argument) in arguments.enumerated() { vector[index] = strdup(argument) }
        vector[arguments.count] = nil
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = vector
        return LLVMFuzzerRunDriver(&argc, &argv, callback)
    }
    #endif
}

#if PARLEY_FUZZ
/// One input. A broken invariant aborts, which libFuzzer reports and saves like a crash.
/// (A free function: a C callback cannot capture even `Self`.)
private func fuzzOne(_ target: FuzzTarget, _ data: UnsafePointer<UInt8>?, _ count: Int) -> Int32 {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
    let broken = target.run(input)
    if !broken.isEmpty {
        FileHandle.standardError.write(Data("parley-fuzz \(target.rawValue): invariant broken: \(broken.joined(separator: "; "))\n".utf8))
        abort()
    }
    return 0
}
#endif
