import Foundation
import Logging
import Synchronization
import ParleyTesting
import Testing
import UpstreamSimulator

import ParleyDomain
@testable import ParleyServer

/// The log, as an operator's collector sees it: the real binary at `PARLEY_LOG_LEVEL=trace`, in
/// both formats, through a run that makes every kind of secret (client tokens, a password, the
/// simulator's access and refresh tokens, an admin token, the encryption key, a webhook secret,
/// a flow URL's secret), and not one of them in any line; with `json`, every line is one object
/// with the documented members.
@Suite(.serialized) struct LogFormatLiveTests {
    static let adminToken = "admin-token-for-the-log-test-0123456789abcdef"
    static let keyBytes = "c2VjcmV0LWVuY3J5cHRpb24ta2V5LTAxMjM0NTY3ODk="  // 32 bytes
    static let webhookSecret = "whsec_bG9nLXRlc3Qtd2ViaG9vay1zZWNyZXQtMDEyMzQ1"

    @Test(arguments: ["text", "json"])
    func noSecretOfAFullRunReachesTheLog(format: String) async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        try await withRunningSimulator(logger: quietLogger) { simulatorPort, simulator in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            let port = try FreePort.find()
            let destinations = try ScratchFile.write(
                """
                webhooks: [{ url: "http://127.0.0.1:9/hook", secretRef: "env:LOG_TEST_HOOK" }]
                destinations:
                  - { name: sim, url: "\(sim)", basic: {}, csrf: true }
                  - name: pw
                    url: \(sim)
                    oauth2: { grant: password, tokenEndpoint: "\(sim)/oauth/token", clientId: parley-confidential, clientSecret: s3cret, scopes: [read] }
                  - name: code
                    url: \(sim)
                    oauth2: { grant: authorization_code, authorizationEndpoint: "\(sim)/oauth/authorize", tokenEndpoint: "\(sim)/oauth/token", clientId: parley-public, scopes: [read] }
                """, suffix: ".yaml")
            let parley = try await ParleyProcess.start(
                environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": "k1:\(Self.keyBytes)", "PARLEY_DESTINATIONS": destinations,
                    "PARLEY_ADMIN_TOKENS": Self.adminToken, "PARLEY_LOG_LEVEL": "trace", "PARLEY_LOG_FORMAT": format,
                    "LOG_TEST_HOOK": Self.webhookSecret, "PARLEY_LISTEN": "127.0.0.1:\(port)", "PARLEY_PUBLIC_URL": "http://127.0.0.1:\(port)",
                ], port: port)
            defer { Task { await parley.stop() } }
            func call(_ method: String, _ target: String, token: String? = nil, json: [String: Any]? = nil) async throws -> RawHTTPResponse {
                var headers: [(String, String)] = []
                if let token { headers.append(("Authorization", "Bearer \(token)")) }
                var body: [UInt8] = []
                if let json {
                    headers.append(("Content-Type", "application/json"))
                    body = Array(try JSONSerialization.data(withJSONObject: json))
                }
                return try await RawHTTP.request(port: port, method: method, target: target, headers: headers, body: body)
            }
            var secrets = [Self.adminToken, Self.keyBytes, Self.webhookSecret, String(Self.webhookSecret.dropFirst(6)), "wonderland", "s3cret"]
            // Basic with CSRF, a password grant (access and refresh tokens), an authorization-code flow's URL.
            for destination in ["sim", "pw", "code"] {
                let created = try await call(
                    "POST", "/v1/registrations", json: ["destination": destination, "credentials": ["username": "alice", "password": "wonderland"]])
                #expect(created.status == 201, "\(created.text)")
                let token = try #require(created.json?["clientToken"] as? String)
                secrets.append(token)
                // A modifying call to a CSRF-protected path: the CSRF token is fetched and sent too.
                let path = destination == "sim" ? "/v1/proxy/csrf/items" : "/v1/proxy/oauth-api/data"
                let answer = try await call(destination == "sim" ? "POST" : "GET", path, token: token, json: destination == "sim" ? ["a": 1] : nil)
                if destination == "code" {
                    #expect(answer.status == 401, "\(answer.text)")
                    let url = try #require((answer.json?["flow"] as? [String: Any])?["url"] as? String)
                    secrets.append(try #require(url.components(separatedBy: "k=").last))
                } else {
                    #expect((200..<300).contains(answer.status), "\(answer.text)")
                }
            }
            #expect(try await call("GET", "/admin/v1/registrations", token: Self.adminToken).status == 200)
            #expect(try await call("GET", "/admin/v1/events", token: Self.adminToken).status == 200)
            #expect(try await call("GET", "/admin/v1/audit", token: "wrong-admin-token-0123456789").status == 401)
            // A deregistration: a registration.revoked event for the webhook.
            #expect(try await call("DELETE", "/v1/registrations/me", token: secrets[secrets.count - 3]).status == 204)
            secrets += simulator.oauth.issuedTokenValues
            #expect(simulator.oauth.issuedTokenValues.count >= 2, "the password grant's tokens are among the secrets")
            // A webhook attempt fails (nothing listens on port 9), and its warning is logged.
            try await parley.waitForOutput("webhook not delivered", timeout: .seconds(15))
            await parley.stop()

            let lines = parley.log.split(separator: "\n").filter { !$0.isEmpty }
            #expect(lines.count > 20)
            for secret in secrets where !secret.isEmpty {
                let leaking = lines.filter { $0.contains(secret) }
                #expect(leaking.isEmpty, "a secret (\(secret.count) characters) in \(leaking.count) log lines: \(leaking.first?.prefix(300) ?? "")")
            }
            guard format == "json" else { return }
            var requests = 0
            for line in lines {
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object != nil, "not one JSON object: \(line.prefix(300))")
                guard let object else { continue }
                #expect(object["time"] is String && object["level"] is String && object["message"] is String && object["label"] is String)
                if object["message"] as? String == "request" {
                    requests += 1
                    for member in ["request.id", "http.route", "http.status", "duration.ms", "http.method"] {
                        #expect(object[member] is String, "\(member) missing: \(line.prefix(300))")
                    }
                }
            }
            #expect(requests >= 8, "every answered request logs one line")
        }
    }

    /// The handler alone: members, metadata of every kind, and a metadata key that would hide a member.
    @Test func theJSONHandlerWritesOneObjectPerLine() throws {
        let lines = LinesBox()
        var handler = LineLogHandler(label: "parley", format: .json) { lines.append($0) }
        handler[metadataKey: "request.id"] = "abc"
        handler.log(
            event: LogEvent(
                level: .warning, message: "it \"failed\"\n", metadata: ["message": "hidden?", "list": ["a", "b"], "n": "\(3)"],
                source: "ParleyServer", file: #fileID, function: #function, line: #line))
        let written = try #require(lines.all.first)
        #expect(written.last == UInt8(ascii: "\n") && written.dropLast().allSatisfy { $0 != UInt8(ascii: "\n") }, "one line")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(written)) as? [String: Any])
        #expect(object["message"] as? String == "it \"failed\"\n")
        #expect(object["metadata.message"] as? String == "hidden?")
        #expect(object["level"] as? String == "warning" && object["label"] as? String == "parley" && object["request.id"] as? String == "abc")
        #expect(object["list"] as? [String] == ["a", "b"] && object["n"] as? String == "3")
        #expect((object["time"] as? String)?.hasSuffix("Z") == true)
    }

    /// The text handler writes the line swift-log's `StreamLogHandler` writes for the same
    /// handler metadata and event (it only formats later), with the timestamp in the same form.
    @Test func theTextHandlerWritesStreamLogHandlersLine() throws {
        let lines = LinesBox()
        let stream = TextBox()
        var text = LineLogHandler(label: "parley", format: .text) { lines.append($0) }
        var reference = StreamLogHandler(label: "parley", stream: stream, metadataProvider: nil)
        text.logLevel = .trace
        reference.logLevel = .trace
        for (key, value) in [("request.id", "abc"), ("http.route", "/v1/proxy/*"), ("a", "first")] as [(String, Logger.Metadata.Value)] {
            text[metadataKey: key] = value
            reference[metadataKey: key] = value
        }
        let event = LogEvent(
            level: .warning, message: "it failed", metadata: ["a": "overridden", "list": ["x", "y"], "n": "\(3)"],
            source: "ParleyServer", file: #fileID, function: #function, line: #line)
        text.log(event: event)
        reference.log(event: event)
        let written = String(decoding: try #require(lines.all.first), as: UTF8.self)
        let expected = try #require(stream.all.first)
        #expect(written.drop { $0 != " " } == expected.drop { $0 != " " })
        #expect(written.hasSuffix(" [ParleyServer] it failed\n"), "\(written)")
        #expect(written.contains(" a=overridden http.route=/v1/proxy/* list=[\"x\", \"y\"] n=3 request.id=abc "), "\(written)")
        #expect(written.prefix { $0 != " " }.count == expected.prefix { $0 != " " }.count, "the same timestamp form: \(written) \(expected)")
    }
}

private final class TextBox: TextOutputStream, Sendable {
    private let text = Mutex<[String]>([])
    func write(_ string: String) { text.withLock { $0.append(string) } }
    var all: [String] { text.withLock { $0 } }
}

private final class LinesBox: Sendable {
    private let lines = Mutex<[[UInt8]]>([])
    func append(_ line: [UInt8]) { lines.withLock { $0.append(line) } }
    var all: [[UInt8]] { lines.withLock { $0 } }
}
