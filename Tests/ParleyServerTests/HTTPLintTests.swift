import Foundation
import ParleyTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// httplint (REDbot's linter, PyPI) over every kind of answer Parley itself makes: problem+json
/// (400, 401 with `WWW-Authenticate`, 404, 405 with `Allow`, 429 with `Retry-After`), the hosted
/// pages (confirmation, Basic form, the form refused, finished, failed, unknown flow, `/web/`
/// without a binding), the redirects of a flow's start, `/healthz`, `/readyz`, `/metrics` and
/// `/openapi.json` (and its `304`). Raw answers from the real binary go to scripts/httplint.sh;
/// any WARN or BAD note that Tests/Fixtures/httplint-allowed.txt does not name fails the test.
extension RawFramedResponse {
    var setCookies: [String] { headers.filter { $0.name.lowercased() == "set-cookie" }.map(\.value) }
}

@Suite(.serialized) struct HTTPLintTests {
    /// A minimal browser: one connection per request, the cookies it was given sent back.
    final class Capture: @unchecked Sendable {
        let port: Int
        let directory: String
        var cookies: [String: String] = [:]
        var kinds: [String] = []

        init(port: Int, directory: String) {
            self.port = port
            self.directory = directory
        }

        /// Sends one request, keeps request and answer as `<kind>.request` / `<kind>.response`.
        /// Where an answer sends the browser on (`Location`, or an onward page's `Refresh`),
        /// fetched; the answer itself when it goes nowhere.
        func onward(_ answer: RawFramedResponse, as kind: String) async throws -> RawFramedResponse {
            if let location = answer.header("Location") { return try await capture(kind, "GET", HTTPLintTests.path(of: location)) }
            if let refresh = answer.header("Refresh"), refresh.hasPrefix("0; url=") {
                return try await capture(kind, "GET", HTTPLintTests.path(of: String(refresh.dropFirst("0; url=".count))))
            }
            return answer
        }

        @discardableResult
        func capture(
            _ kind: String, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = [],
            sendCookies: Bool = true
        ) async throws -> RawFramedResponse {
            var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\nUser-Agent: parley-httplint-test\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            if sendCookies && !cookies.isEmpty {
                head += "Cookie: " + cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ") + "\r\n"
            }
            if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
            head += "\r\n"
            let request = Array(head.utf8) + body
            let port = self.port
            let raw = try await runOnOwnThread { () throws -> [UInt8] in
                let fd = try RawHTTP.connectLoopback(port: port, timeout: 30)
                defer { close(fd) }
                var offset = 0
                while offset < request.count {
                    let n = request.withUnsafeBytes { send(fd, $0.baseAddress! + offset, request.count - offset, Int32(MSG_NOSIGNAL)) }
                    if n <= 0 { break }
                    offset += n
                }
                var out: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = read(fd, &buffer, buffer.count)
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { return out }
                    out.append(contentsOf: buffer[0..<n])
                }
            }
            if !kind.isEmpty {
                try Data(request.prefix(head.utf8.count)).write(to: URL(fileURLWithPath: "\(directory)/\(kind).request"))
                try Data(raw).write(to: URL(fileURLWithPath: "\(directory)/\(kind).response"))
                kinds.append(kind)
            }
            let answer = RawHTTP.judge(raw)
            for cookie in answer.setCookies {
                let pair = cookie.prefix { $0 != ";" }.split(separator: "=", maxSplits: 1).map(String.init)
                guard pair.count == 2 else { continue }
                if pair[1].isEmpty || cookie.lowercased().contains("max-age=0") { cookies[pair[0]] = nil } else { cookies[pair[0]] = pair[1] }
            }
            return answer
        }
    }

    static func confirmation(_ page: RawFramedResponse) -> ConfirmationForm? {
        ConfirmationForm(status: page.status ?? 0, setCookies: page.setCookies, body: page.body)
    }

    static func path(of url: String) -> String {
        guard let components = URLComponents(string: url) else { return url }
        return components.path + (components.query.map { "?" + $0 } ?? "")
    }

    static func value(of field: String, in html: String) -> String? {
        guard let start = html.range(of: "name=\"\(field)\" value=\"") else { return nil }
        return String(html[start.upperBound...].prefix { $0 != "\"" })
    }

    @Test func everyKindOfAnswerPassesHTTPLint() async throws {
        let upstream = try HostileUpstream(cases: [
            "ok": HostileAnswer(.response(headers: [("Content-Type", "application/json")], body: #"{"ok":true}"#)),
            "refuses": HostileAnswer(
                .response(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", #"Basic realm="x""#)], body: "")),
        ])
        defer { upstream.stop() }
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let destinations = try ScratchFile.write(
            """
            {"destinations":[
              {"name":"form-ok","url":"\(upstream.url("ok"))","basic":{"form":true}},
              {"name":"form-refused","url":"\(upstream.url("refuses"))","basic":{"form":true}},
              {"name":"oauth","url":"\(upstream.url("ok"))","oauth2":{"grant":"authorization_code",
                "authorizationEndpoint":"http://127.0.0.1:1/authorize","tokenEndpoint":"http://127.0.0.1:1/token","clientId":"parley"}}
            ]}
            """, suffix: ".json")
        defer { try? FileManager.default.removeItem(atPath: destinations) }
        var env = ServeTests.environment(database: database, destinations: destinations)
        env["PARLEY_RATE_LIMIT_REGISTRATIONS"] = "4/60"
        let parley = try await ParleyProcess.start(environment: env)
        defer { Task { await parley.stop() } }

        let directory = NSTemporaryDirectory() + "parley-httplint-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let api = Capture(port: parley.port, directory: directory)
        let json = [("Content-Type", "application/json")]

        // Operations and the API's own answers.
        try await api.capture("healthz", "GET", "/healthz")
        try await api.capture("readyz", "GET", "/readyz")
        try await api.capture("metrics", "GET", "/metrics")
        let document = try await api.capture("openapi", "GET", "/openapi.json")
        let tag = try #require(document.header("ETag"), "/openapi.json carries a validator")
        #expect(try await api.capture("openapi-304", "GET", "/openapi.json", headers: [("If-None-Match", tag)]).status == 304)
        #expect(try await api.capture("problem-401", "GET", "/v1/registrations/me").status == 401)
        #expect(try await api.capture("problem-405", "DELETE", "/healthz").status == 405)
        #expect(try await api.capture("problem-404", "GET", "/v1/nothing-here").status == 404)
        #expect(try await api.capture("problem-400", "POST", "/v1/registrations", headers: json, body: Array("{".utf8)).status == 400)
        func register(_ destination: String) async throws -> String {
            let answer = try await api.capture(
                destination == "form-ok" ? "registration-201" : "", "POST", "/v1/registrations", headers: json,
                body: Array(#"{"destination":"\#(destination)"}"#.utf8))
            return try #require(answer.json?["clientToken"] as? String, "\(answer.status) \(answer.text)")
        }
        let okToken = try await register("form-ok")
        let refusedToken = try await register("form-refused")
        let oauthToken = try await register("oauth")
        var limited: RawFramedResponse?
        for _ in 0..<4 where limited == nil {
            let answer = try await api.capture("problem-429", "POST", "/v1/registrations", headers: json, body: Array(#"{"destination":"nowhere"}"#.utf8))
            if answer.status == 429 { limited = answer }
        }
        #expect(limited?.header("Retry-After") != nil, "a 429 with Retry-After")
        try await api.capture("registration-me", "GET", "/v1/registrations/me", headers: [("Authorization", "Bearer \(okToken)")])

        func startFlow(_ token: String, kind: String) async throws -> String {
            let answer = try await api.capture(
                kind == "basic" && token == okToken ? "flow-201" : "", "POST", "/v1/flows", headers: json + [("Authorization", "Bearer \(token)")],
                body: Array(#"{"kind":"\#(kind)"}"#.utf8))
            return Self.path(of: try #require(answer.json?["url"] as? String, "\(answer.status) \(answer.text)"))
        }

        // The Basic form, accepted: confirmation page, its redirect, the form, the redirect to
        // the done page, the done page.
        let browser = Capture(port: parley.port, directory: directory)
        let okFlow = try await startFlow(okToken, kind: "basic")
        let confirmation = try await browser.capture("page-confirmation", "GET", okFlow)
        let form = try #require(Self.confirmation(confirmation), "\(confirmation.status) \(confirmation.text.prefix(300))")
        let confirmed = try await browser.capture(
            "confirmed", "POST", ConfirmationForm.target(beside: okFlow), headers: [form.headers[0]], body: form.body)
        let formPage = try await browser.onward(confirmed, as: "page-basic-form")
        let secret = try #require(Self.value(of: "k", in: formPage.text), "\(formPage.text)")
        let credentialsTarget = String(okFlow.prefix { $0 != "?" }) + "/credentials"
        let form2 = [("Content-Type", "application/x-www-form-urlencoded")]
        let accepted = try await browser.capture(
            "redirect-credentials-accepted", "POST", credentialsTarget, headers: form2, body: Array("k=\(secret)&username=alice&password=wonderland".utf8))
        #expect(accepted.status == 303)
        try await browser.capture("page-finished", "GET", Self.path(of: try #require(accepted.header("Location"))))

        // The Basic form, refused five times: the form again with its error, then the failed page.
        let refusing = Capture(port: parley.port, directory: directory)
        let refusedFlow = try await startFlow(refusedToken, kind: "basic")
        let refusedConfirmation = try #require(Self.confirmation(try await refusing.capture("", "GET", refusedFlow)))
        let refusedForm = try await refusing.capture(
            "", "POST", ConfirmationForm.target(beside: refusedFlow), headers: [refusedConfirmation.headers[0]], body: refusedConfirmation.body)
        let refusedPage = try await refusing.onward(refusedForm, as: "")
        let refusedSecret = try #require(Self.value(of: "k", in: refusedPage.text))
        let refusedTarget = String(refusedFlow.prefix { $0 != "?" }) + "/credentials"
        var last: RawFramedResponse?
        for attempt in 1...5 {
            last = try await refusing.capture(
                attempt == 1 ? "page-basic-form-refused" : attempt == 5 ? "page-failed" : "", "POST", refusedTarget, headers: form2,
                body: Array("k=\(refusedSecret)&username=alice&password=wrong".utf8))
        }
        #expect(last.map { String(decoding: $0.body, as: UTF8.self).contains("too_many_attempts") || $0.status != 200 } == true)

        // An OAuth2 flow's start: the redirect to the authorization server.
        let oauth = Capture(port: parley.port, directory: directory)
        let oauthFlow = try await startFlow(oauthToken, kind: "oauth2")
        let oauthConfirmation = try #require(Self.confirmation(try await oauth.capture("", "GET", oauthFlow)))
        let onward = try await oauth.capture(
            "page-onward-authorization-server", "POST", ConfirmationForm.target(beside: oauthFlow), headers: [oauthConfirmation.headers[0]],
            body: oauthConfirmation.body)
        #expect(onward.header("Refresh")?.contains("http://127.0.0.1:1/authorize") == true || onward.header("Location") != nil)

        // Pages for what cannot go on.
        try await api.capture("page-unknown-flow", "GET", "/flows/5b0e9c3e-2f41-4a8e-b1a0-6a0f0d3c2e77?k=nothing")
        try await api.capture("page-web-unbound", "GET", "/web/form-ok/anything", sendCookies: false)

        let output = directory + "/httplint.out"
        let status = try Spawn.runAndWait(
            ["/bin/bash", packageRoot + "/scripts/httplint.sh", packageRoot + "/Tests/Fixtures/httplint-allowed.txt", directory],
            output: output, directory: packageRoot)
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        print(text)
        #expect(api.kinds.count + browser.kinds.count + refusing.kinds.count + oauth.kinds.count >= 22)
        #expect(status == 0, "httplint found problems:\n\(text.suffix(6000))")
        await parley.stop()
    }
}
