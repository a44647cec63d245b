import ArgumentParser
import Configuration
import Conversation
import CurlTransport
import Foundation
import Logging
import ParleyEncoding
import ParleyServer
import ParleyDomain

/// `parley admin …`: the administration API of a running instance, for operators.
/// The admin token comes from `PARLEY_ADMIN_TOKEN` (never a flag: flags show in `ps`
/// and shell history); answers print as JSON on standard output.
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Administer a running Parley through its admin API (token in PARLEY_ADMIN_TOKEN).",
        subcommands: [Registrations.self, Show.self, Delete.self, Approve.self, Revoke.self, Audit.self])

    struct Connection: ParsableArguments {
        @Option(help: "Parley's base URL (default: PARLEY_URL, else http://127.0.0.1:8080).")
        var url: String?

        func call(_ method: String, _ path: String, query: [(String, String?)] = [], body: [String: Any]? = nil) async throws {
            let reader = ParleyConfiguration.environmentReader()
            guard let token = reader.string(forKey: "parley.admin_token", isSecret: true) else {
                throw ValidationError("set PARLEY_ADMIN_TOKEN to an admin token")
            }
            let base = (url ?? reader.string(forKey: "parley.url", default: "http://127.0.0.1:8080"))
                .trimmingCharacters(in: CharacterSet(charactersIn: "/"))
            let pairs = query.compactMap { name, value in value.map { (name, $0) } }
            let target = base + path + (pairs.isEmpty ? "" : "?" + PercentEncoding.encodeForm(pairs))
            var headers: HeaderFields = ["Authorization": "Bearer " + token, "Accept": "application/json"]
            var payload = RequestBody.empty
            if let body {
                headers.set("Content-Type", "application/json")
                payload = .bytes(Array(try JSONSerialization.data(withJSONObject: body)))
            }
            let transport = CurlTransport(logger: Logger(label: "parley-admin", factory: { _ in SwiftLogNoOpLogHandler() }))
            defer { transport.shutdown() }
            let response = try await transport.send(UpstreamRequest(method: method, url: target, headers: headers, body: payload))
            let bytes = try await response.body.collect(upTo: 16 << 20)
            if !bytes.isEmpty { print(String(decoding: bytes, as: UTF8.self)) }
            guard (200..<300).contains(response.status) else {
                FileHandle.standardError.write(Data("parley admin: \(method) \(path) answered \(response.status)\n".utf8))
                throw ExitCode.failure
            }
        }
    }

    struct Registrations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List registrations, newest first (with token metadata, never values).")
        @OptionGroup var connection: Connection
        @Option(help: "Only this destination.") var destination: String?
        @Option(help: "Only this user hint.") var userHint: String?
        @Option(help: "At most this many (1…500, default 50).") var limit: Int?
        @Option(help: "Continue after the nextCursor of a previous page.") var cursor: String?

        func run() async throws {
            try await connection.call(
                "GET", "/admin/v1/registrations",
                query: [("destination", destination), ("userHint", userHint), ("limit", limit.map(String.init)), ("cursor", cursor)])
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one registration.")
        @OptionGroup var connection: Connection
        @Argument(help: "The registration id.") var id: String
        func run() async throws { try await connection.call("GET", "/admin/v1/registrations/\(try uuid(id))") }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Tear a registration down (upstream, tokens, cookies, client token).")
        @OptionGroup var connection: Connection
        @Argument(help: "The registration id.") var id: String
        func run() async throws { try await connection.call("DELETE", "/admin/v1/registrations/\(try uuid(id))") }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Approve a registration that waits (policy: approval).")
        @OptionGroup var connection: Connection
        @Argument(help: "The registration id.") var id: String
        func run() async throws { try await connection.call("POST", "/admin/v1/registrations/\(try uuid(id))/approval") }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke matching tokens (and a named registration's cookies); at least one filter.")
        @OptionGroup var connection: Connection
        @Option(help: "A registration id.") var registrationId: String?
        @Option(help: "A destination name.") var destination: String?
        @Option(help: "A user hint.") var userHint: String?
        @Option(help: "A scope key (storage URL).") var scopeKey: String?
        @Flag(help: "Also revoke refresh and access tokens at the upstream's RFC 7009 endpoint.") var upstream = false

        func validate() throws {
            if registrationId == nil && destination == nil && userHint == nil && scopeKey == nil {
                throw ValidationError("name at least one of --registration-id, --destination, --user-hint, --scope-key")
            }
        }

        func run() async throws {
            var body: [String: Any] = ["upstream": upstream]
            if let registrationId { body["registrationId"] = try uuid(registrationId) }
            if let destination { body["destination"] = destination }
            if let userHint { body["userHint"] = userHint }
            if let scopeKey { body["scopeKey"] = scopeKey }
            try await connection.call("POST", "/admin/v1/revocations", body: body)
        }
    }

    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Audit events, newest first.")
        @OptionGroup var connection: Connection
        @Option(help: "Only events at or after this RFC 3339 time.") var since: String?
        @Option(help: "At most this many (1…500, default 50).") var limit: Int?
        @Option(help: "Continue after the nextCursor of a previous page.") var cursor: String?

        func run() async throws {
            try await connection.call("GET", "/admin/v1/audit", query: [("since", since), ("limit", limit.map(String.init)), ("cursor", cursor)])
        }
    }
}

private func uuid(_ text: String) throws -> String {
    guard let id = UUID(uuidString: text) else { throw ValidationError("'\(text.prefix(40))' is not a registration id (UUID)") }
    return id.uuidString.lowercased()
}
