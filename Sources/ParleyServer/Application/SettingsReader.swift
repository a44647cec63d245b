public import Configuration
public import Foundation
import ParleyDomain

/// Reads Parley's settings through a `ConfigReader` and collects every problem instead of
/// stopping at the first. Keys are lower-case snake case under a scope (`parley`,
/// `parley.rate_limit`), which `EnvironmentVariablesProvider` reads from the variable of
/// the same words upper-cased (`parley.max_json_bytes` is `PARLEY_MAX_JSON_BYTES`); a
/// problem names that variable whatever the provider, and never carries a secret value.
/// An empty value counts as unset, as it does in the environment reader.
struct SettingsReader {
    /// Shared by a reader and the scoped readers made from it.
    final class Problems {
        var list: [String] = []
    }

    private let reader: ConfigReader
    private let scope: [String]
    let problems: Problems

    init(_ reader: ConfigReader, scope: [String] = ["parley"], problems: Problems = Problems()) {
        self.reader = scope.isEmpty ? reader : reader.scoped(to: ConfigKey(scope))
        self.scope = scope
        self.problems = problems
    }

    private init(scoped reader: ConfigReader, scope: [String], problems: Problems) {
        self.reader = reader
        self.scope = scope
        self.problems = problems
    }

    /// A reader for the keys under `component` (`rate_limit` → `PARLEY_RATE_LIMIT_…`).
    func scoped(_ component: String) -> SettingsReader {
        SettingsReader(scoped: reader.scoped(to: ConfigKey([component])), scope: scope + [component], problems: problems)
    }

    /// The environment variable `key` is read from.
    func variable(_ key: String) -> String { (scope + [key]).joined(separator: "_").uppercased() }

    func report(_ problem: String) { problems.list.append(problem) }

    /// The text of `key`, nil when unset or empty. A secret is read as one (redacted in an
    /// access log) and must never be put into a problem.
    func string(_ key: String, secret: Bool = false) -> String? {
        guard let text = reader.string(forKey: ConfigKey([key]), isSecret: secret), !text.isEmpty else { return nil }
        return text
    }

    /// A whole number in `range`; anything else is a problem and leaves the default.
    func int(_ key: String, default value: Int, in range: ClosedRange<Int>) -> Int {
        let found: String
        if let number = reader.int(forKey: ConfigKey([key])) {
            if range.contains(number) { return number }
            found = "\(number)"
        } else if let text = string(key) {
            found = text  // set, but not a whole number: read again as text to name it
        } else {
            return value
        }
        report("\(variable(key)) must be a whole number in \(range.lowerBound)...\(range.upperBound), got '\(found.prefix(40))'")
        return value
    }

    /// `true`/`1`/`yes` or `false`/`0`/`no` (any case, the provider's rule); anything else is a problem.
    func bool(_ key: String, default value: Bool) -> Bool {
        if let flag = reader.bool(forKey: ConfigKey([key])) { return flag }
        guard let text = string(key) else { return value }
        report("\(variable(key)) must be true or false, got '\(text.prefix(40))'")
        return value
    }

    /// A comma-separated list, each entry trimmed, empty entries dropped.
    func list(_ key: String, secret: Bool = false) -> [String] {
        (reader.stringArray(forKey: ConfigKey([key]), isSecret: secret) ?? [])
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// Runs `read` over `reader` and returns its value, or throws every problem it reported.
    static func read<Value>(
        _ reader: ConfigReader, _ read: (SettingsReader) -> Value?
    ) throws(ParleyConfiguration.Invalid) -> Value {
        let settings = SettingsReader(reader)
        let value = read(settings)
        guard settings.problems.list.isEmpty, let value else {
            throw ParleyConfiguration.Invalid(problems: settings.problems.list)
        }
        return value
    }
}

extension ParleyConfiguration {
    /// The variables whose values are secrets: the environment provider marks them, so an
    /// access log (`CONFIG_ACCESS_LOG_FILE`) or a debug description shows them redacted.
    public static let secretVariables: Set<String> = [
        "PARLEY_DATABASE_URL", "PARLEY_ENCRYPTION_KEYS", "PARLEY_ADMIN_TOKENS", "PARLEY_ADMIN_TOKEN",
    ]

    /// A reader over environment variables (the process's unless given); a variable set to
    /// the empty string counts as unset.
    public static func environmentReader(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> ConfigReader {
        ConfigReader(
            provider: EnvironmentVariablesProvider(
                environmentVariables: environment.filter { !$0.value.isEmpty }, secretsSpecifier: .specific(secretVariables)))
    }
}
