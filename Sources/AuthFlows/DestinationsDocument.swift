import Foundation
import Yams

/// The destinations file's text (`destinations: [ … ]` in YAML; JSON is YAML too) to
/// checked destinations, with every problem reported at once. Pure, so that the whole
/// path from bytes to `Destination`s can be fuzzed (`parley-fuzz destinations`);
/// reading the file is the server's (`DestinationsFile.load(path:)`).
public enum DestinationsDocument {
    /// The whole file as written: the destinations and the identity providers they trust.
    public struct Contents: Sendable, Decodable, Equatable {
        public var destinations: [DestinationSpec]
        public var identityProviders: [IdentityProviderSpec]?
        /// Webhook endpoints for the events of every destination.
        public var webhooks: [WebhookSpec]?
        /// Web apps that call Parley from the browser, with a cookie in place of a client token.
        public var browserApps: [BrowserAppSpec]?

        public init(
            destinations: [DestinationSpec], identityProviders: [IdentityProviderSpec]? = nil, webhooks: [WebhookSpec]? = nil,
            browserApps: [BrowserAppSpec]? = nil
        ) {
            self.destinations = destinations
            self.identityProviders = identityProviders
            self.webhooks = webhooks
            self.browserApps = browserApps
        }
    }

    /// The whole file checked.
    public struct Checked: Sendable {
        public let destinations: [Destination]
        public let identityProviders: [IdentityProvider]
        /// The file's global webhook subscriptions (each destination holds its own).
        public let webhooks: [WebhookSubscription]
        /// The browser apps, checked.
        public var browserApps: [BrowserApp] = []

        /// Every subscription of the file: the global ones, then each destination's.
        public var allWebhooks: [WebhookSubscription] { webhooks + destinations.flatMap(\.webhooks) }
    }

    /// The written form of the whole file, in which every key is one its type knows. Otherwise
    /// every key no type knows (with its place and the nearest known key: a misspelt `polcy`
    /// must not start an open destination), together with the first decoding error, or with
    /// every problem `validate` finds when the file decodes.
    public static func decodeContents(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> Contents {
        let recorder = KeyRecorder()
        guard let recorderKey = KeyChecked<Contents>.recorderKey else { throw DestinationSpec.Invalid(problems: ["\(source): cannot check its keys"]) }
        let contents: Contents
        do {
            contents = try YAMLDecoder().decode(KeyChecked<Contents>.self, from: text, userInfo: [recorderKey: recorder]).value
        } catch let error as DecodingError {
            var line = "\(source): \(describe(error))"
            if case .keyNotFound(let key, let context) = error, let near = recorder.misspelling(of: key.stringValue, at: context.codingPath) {
                line += " (is '\(near.prefix(80))' a misspelling?)"
            }
            throw DestinationSpec.Invalid(problems: [line] + recorder.unknownKeys().map { "\(source): \($0)" })
        } catch {
            throw DestinationSpec.Invalid(problems: ["\(source): not valid YAML (\(error))"])
        }
        let unknown = recorder.unknownKeys().map { "\(source): \($0)" }
        guard unknown.isEmpty else {
            var problems = unknown
            do { _ = try validate(contents) } catch { problems += error.problems }
            throw DestinationSpec.Invalid(problems: problems)
        }
        return contents
    }

    /// The written form of every entry; one problem (the first the decoder met) otherwise.
    public static func decode(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> [DestinationSpec] {
        try decodeContents(text, source: source).destinations
    }

    /// Every destination and identity provider checked, names and issuers unique, and a
    /// destination that requires verified users only where some provider can vouch for one;
    /// every problem of every entry otherwise.
    public static func validate(_ contents: Contents) throws(DestinationSpec.Invalid) -> Checked {
        var problems: [String] = []
        var destinations: [Destination] = []
        let specs = contents.identityProviders ?? []
        let issuers = specs.map(\.issuer).filter { !$0.isEmpty }
        do { destinations = try validate(contents.destinations, listedProviders: issuers) } catch { problems += error.problems }
        var providers: [IdentityProvider] = []
        for (position, spec) in specs.enumerated() {
            do { providers.append(try spec.validated(position: position)) } catch { problems += error.problems }
        }
        var webhooks: [WebhookSubscription] = []
        for (index, spec) in (contents.webhooks ?? []).enumerated() {
            let (subscription, found) = spec.validated(at: "webhooks[\(index)]", scope: nil)
            problems += found
            if let subscription { webhooks.append(subscription) }
        }
        var apps: [BrowserApp] = []
        let names = Set(contents.destinations.map(\.name))
        for (index, spec) in (contents.browserApps ?? []).enumerated() {
            let (app, found) = spec.validated(at: "browserApps[\(index)]", destinations: names)
            problems += found
            if let app { apps.append(app) }
        }
        var appNames: Set<String> = []
        for app in apps where !appNames.insert(app.name).inserted {
            problems.append("browser app '\(app.name)' is listed twice")
        }
        var seen: Set<String> = []
        for spec in specs where !spec.issuer.isEmpty && !seen.insert(spec.issuer).inserted {
            problems.append("identity provider '\(spec.issuer.prefix(200))' is listed twice")
        }
        if specs.isEmpty {
            for spec in contents.destinations where spec.registration?.identity == "required" {
                problems.append("destination '\(spec.name)': registration.identity is required, but the file lists no identityProviders")
            }
            for spec in contents.destinations where spec.registration?.implicit == true {
                problems.append("destination '\(spec.name)': registration.implicit takes agents' access tokens, but the file lists no identityProviders to issue them")
            }
        }
        guard problems.isEmpty else { throw DestinationSpec.Invalid(problems: problems) }
        var checked = Checked(destinations: destinations, identityProviders: providers, webhooks: webhooks)
        checked.browserApps = apps
        return checked
    }

    /// The whole path for the whole file: text to checked destinations and identity providers.
    public static func readContents(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> Checked {
        try validate(decodeContents(text, source: source))
    }

    /// Every entry checked, and names unique; every problem of every entry otherwise.
    /// `listedProviders`: the issuers of the file's identity providers (`DestinationSpec.validated`).
    public static func validate(_ specs: [DestinationSpec], listedProviders: [String] = []) throws(DestinationSpec.Invalid) -> [Destination] {
        var destinations: [Destination] = []
        var problems: [String] = []
        for spec in specs {
            do { destinations.append(try spec.validated(listedProviders: listedProviders)) } catch { problems += error.problems }
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

    /// The whole path: text to checked destinations (the identity providers checked too).
    public static func read(_ text: String, source: String = "destinations") throws(DestinationSpec.Invalid) -> [Destination] {
        try readContents(text, source: source).destinations
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

/// Decodes `Value` through a `KeyCheckingDecoder` whose recorder travels in `userInfo`.
private struct KeyChecked<Value: Decodable>: Decodable {
    static var recorderKey: CodingUserInfoKey? { CodingUserInfoKey(rawValue: "parley.keyRecorder") }
    let value: Value

    init(from decoder: any Decoder) throws {
        guard let key = Self.recorderKey, let recorder = decoder.userInfo[key] as? KeyRecorder else {
            value = try Value(from: decoder)
            return
        }
        value = try Value(from: KeyCheckingDecoder(base: decoder, recorder: recorder))
    }
}
