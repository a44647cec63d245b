import Foundation
import Yams

/// The destinations file's text (`destinations: [ … ]` in YAML; JSON is YAML too) to
/// checked destinations, with every problem reported at once. Pure, so that the whole
/// path from bytes to `Destination`s can be fuzzed (`parley-fuzz destinations`);
/// reading the file is the server's (`DestinationsFile.load(path:)`).
public enum DestinationsDocument {
    struct File: Decodable {
        var destinations: [DestinationSpec]
    }

    /// The written form of every entry; one problem (the first the decoder met) otherwise.
    public static func decode(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> [DestinationSpec] {
        do {
            return try YAMLDecoder().decode(File.self, from: text).destinations
        } catch let error as DecodingError {
            throw DestinationSpec.Invalid(problems: ["\(source): \(describe(error))"])
        } catch {
            throw DestinationSpec.Invalid(problems: ["\(source): not valid YAML (\(error))"])
        }
    }

    /// Every entry checked, and names unique; every problem of every entry otherwise.
    public static func validate(_ specs: [DestinationSpec]) throws(DestinationSpec.Invalid) -> [Destination] {
        var destinations: [Destination] = []
        var problems: [String] = []
        for spec in specs {
            do { destinations.append(try spec.validated()) } catch { problems += error.problems }
        }
        var seen: [String: Int] = [:]
        for spec in specs { seen[spec.name, default: 0] += 1 }
        for spec in specs where seen[spec.name, default: 0] > 1 {
            problems.append("destination '\(spec.name)' is defined twice")
            seen[spec.name] = 0
        }
        guard problems.isEmpty else { throw DestinationSpec.Invalid(problems: problems) }
        return destinations
    }

    /// The whole path: text to checked destinations.
    public static func read(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> [Destination] {
        try validate(decode(text, source: source))
    }

    /// A decoding error as a path and a reason (`missing 'url' at .destinations[0]`).
    public static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing '\(key.stringValue)' at \(path(context).isEmpty ? "top level" : path(context))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "bad value at \(path(context)): \(context.debugDescription)"
        @unknown default: return "cannot decode"
        }
    }
}
