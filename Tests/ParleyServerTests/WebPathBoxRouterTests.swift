import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Synchronization
import Testing

/// The hosted upstream kept in its box (issue 20): what an upstream page served at
/// `/web/{destination}/…` may not do with Parley's origin, through the real router.
@Suite struct WebPathBoxRouterTests {
    /// The hosted-flow tests' SP, plus `/sp/hostile`: a page whose answer claims every power
    /// over the origin it can name in a header.
    final class BoxUpstream: Sendable {
        let sp = HostedFlowRouterTests.FakeUpstream()
        let seen = Mutex<[UpstreamRequest]>([])
        var count: Int { seen.withLock { $0.count } }
        var last: UpstreamRequest? { seen.withLock { $0.last } }

        static let hostileHeaders: HeaderFields = [
            "Content-Type": "text/html; charset=utf-8",
            "Service-Worker-Allowed": "/",
            "Access-Control-Allow-Origin": "https://evil.example",
            "Access-Control-Allow-Credentials": "true",
            "Access-Control-Allow-Methods": "POST, DELETE",
            "Access-Control-Allow-Headers": "*",
            "Access-Control-Allow-Private-Network": "true",
            "Access-Control-Expose-Headers": "*",
            "Access-Control-Max-Age": "86400",
            "Content-Security-Policy": "frame-ancestors *",
            "X-Frame-Options": "ALLOWALL",
            "Clear-Site-Data": "\"cookies\", \"storage\"",
            "Strict-Transport-Security": "max-age=0",
            "Alt-Svc": "h2=\"evil.example:443\"",
            "NEL": "{\"report_to\":\"evil\",\"max_age\":31536000}",
            "Report-To": "{\"group\":\"evil\",\"max_age\":31536000,\"endpoints\":[{\"url\":\"https://evil.example/r\"}]}",
            "Set-Cookie": "parley_flow=planted; Path=/web/sp/deeper/",
            "X-Kept": "yes",
        ]

        func answer(_ request: UpstreamRequest) -> UpstreamResponse {
            seen.withLock { $0.append(request) }
            if URLParts(request.url)?.path == "/sp/hostile" { return .text(200, "<html>hostile</html>", headers: Self.hostileHeaders) }
            return sp.answer(request)
        }
    }

    static func withRouter(
        _ upstream: BoxUpstream, flows: InMemoryFlows = InMemoryFlows(), _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { upstream.answer($0) }, clock: TestClock())
        dependencies.flows = flows
        let app = try buildApplication(configuration: try HostedFlowRouterTests.configuration(), dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    /// A registration on `sp` with a pending saml2 flow, and the browser bound to it: (flow id, `parley_flow=…`).
    static func boundBrowser(_ client: any TestClientProtocol) async throws -> (id: String, cookie: String) {
        let token = try await HostedFlowRouterTests.register(client, "sp")
        let (id, start) = try await HostedFlowRouterTests.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
        let cookie = try await FlowConfirmationRouterTests.confirm(client, start) { HostedFlowRouterTests.cookie($0) }
        #expect(cookie.hasPrefix("parley_flow=\(id)."))
        return (id, cookie)
    }

    static func expectFramingRefused(_ response: TestResponse, _ what: String) {
        #expect(response.headers[values: .contentSecurityPolicy].contains { Self.saysNoFraming($0) }, "\(what): no frame-ancestors 'none'")
        #expect(response.headers[values: HTTPField.Name("X-Frame-Options")!] == ["DENY"], "\(what)")
    }

    /// Whether a policy's first `frame-ancestors` directive is `'none'` (a later one is ignored).
    static func saysNoFraming(_ policy: String) -> Bool {
        let directive = policy.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.lowercased().hasPrefix("frame-ancestors") }
        return directive?.lowercased() == "frame-ancestors 'none'"
    }

    // MARK: 1. service workers

    @Test func aServiceWorkerScriptIsNeverForwardedAndNoAnswerWidensItsScope() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            let (_, cookie) = try await Self.boundBrowser(client)
            let before = upstream.count
            // What a browser sends for navigator.serviceWorker.register('/web/sp/sw.js').
            let script: HTTPFields = [
                .cookie: cookie, HTTPField.Name("Service-Worker")!: "script", HTTPField.Name("Sec-Fetch-Site")!: "same-origin",
                HTTPField.Name("Sec-Fetch-Mode")!: "same-origin", HTTPField.Name("Sec-Fetch-Dest")!: "serviceworker",
            ]
            try await client.execute(uri: "/web/sp/sw.js", method: .get, headers: script) { response in
                #expect(response.status == .forbidden)
                #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                #expect(String(buffer: response.body).contains("service-worker"))
            }
            #expect(upstream.count == before, "a service-worker script request reached the upstream")
            try await client.execute(uri: "/web/sp/hostile", method: .get, headers: [.cookie: cookie]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[HTTPField.Name("Service-Worker-Allowed")!] == nil)
            }
        }
    }

    // MARK: 2. framing

    @Test func everyWebAnswerRefusesToBeFramed() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            let (id, cookie) = try await Self.boundBrowser(client)
            // The upstream's own answer, which asks to be framed by anybody.
            try await client.execute(uri: "/web/sp/hostile", method: .get, headers: [.cookie: cookie]) { response in
                #expect(response.status == .ok)
                Self.expectFramingRefused(response, "a forwarded answer")
                #expect(response.headers[values: .contentSecurityPolicy].contains("frame-ancestors *"), "the upstream's own policy is enforced beside")
            }
            // A plain upstream page, a redirect mapped into the path, Parley's refusals and its end of the flow.
            try await client.execute(uri: "/web/sp/page", method: .get, headers: [.cookie: cookie]) { Self.expectFramingRefused($0, "a page") }
            try await client.execute(uri: "/web/sp/acs", method: .post, headers: [.cookie: cookie], body: ByteBuffer(string: "SAMLResponse=x")) {
                #expect($0.status == .found)
                Self.expectFramingRefused($0, "a redirect")
            }
            try await client.execute(uri: "/web/sp/page", method: .get) { Self.expectFramingRefused($0, "no binding") }
            try await client.execute(uri: "/web/nowhere/page", method: .get) { Self.expectFramingRefused($0, "no destination") }
            try await client.execute(uri: "/web/sp/%2e%2e/x", method: .get, headers: [.cookie: cookie]) { Self.expectFramingRefused($0, "an escape") }
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: [.cookie: cookie]) {
                #expect($0.status == .seeOther)
                #expect($0.headers[.location] == "https://parley.example/flows/\(id)/done")
                Self.expectFramingRefused($0, "the end of the flow")
            }
        }
    }

    // MARK: 3. CORS and other origin-wide answer headers

    @Test func noAnswerGrantsOtherSitesOrSpeaksForTheWholeOrigin() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            let (_, cookie) = try await Self.boundBrowser(client)
            let headers: HTTPFields = [.cookie: cookie, .origin: "https://evil.example", HTTPField.Name("Sec-Fetch-Site")!: "cross-site"]
            try await client.execute(uri: "/web/sp/hostile", method: .get, headers: headers) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "<html>hostile</html>")
                let names = response.headers.map { $0.name.canonicalName }
                #expect(!names.contains { $0.hasPrefix("access-control-") }, "\(names)")
                for name in ["service-worker-allowed", "clear-site-data", "strict-transport-security", "alt-svc", "nel", "report-to", "set-cookie"] {
                    #expect(!names.contains(name), "\(name) reached the browser")
                }
                #expect(response.headers[HTTPField.Name("X-Kept")!] == "yes", "an ordinary header is kept")
            }
            // A preflight goes to the upstream, and what it grants stays there.
            try await client.execute(
                uri: "/web/sp/hostile", method: .options,
                headers: [.cookie: cookie, .origin: "https://evil.example", HTTPField.Name("Access-Control-Request-Method")!: "DELETE"]
            ) { response in
                #expect(!response.headers.contains { $0.name.canonicalName.hasPrefix("access-control-") })
            }
        }
    }

    // MARK: 4. other sites' requests

    @Test func anotherSiteMayOnlyNavigateHereWhileTheIdPsFormPostPasses() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            let (_, cookie) = try await Self.boundBrowser(client)
            let form = "application/x-www-form-urlencoded"
            // (method, Sec-Fetch-Site, -Mode, -Dest, Origin, Content-Type, passes)
            let cases: [(HTTPRequest.Method, String?, String?, String?, String?, String?, Bool)] = [
                // The IdP's ACS post: a top-level form navigation from another site.
                (.post, "cross-site", "navigate", "document", "https://idp.example", form, true),
                // The same post from a browser without Fetch Metadata (decisions.md).
                (.post, nil, nil, nil, "https://idp.example", form, true),
                (.post, nil, nil, nil, "https://idp.example", "multipart/form-data; boundary=x", true),
                (.post, nil, nil, nil, "null", form, true),
                // The pages' own requests, and navigations and reads from anywhere.
                (.post, "same-origin", "cors", "empty", "https://parley.example", "application/json", true),
                (.delete, "same-origin", "cors", "empty", nil, nil, true),
                (.put, nil, nil, nil, "https://parley.example", "application/json", true),
                (.post, "none", "navigate", "document", nil, form, true),
                (.get, "cross-site", "no-cors", "image", "https://evil.example", nil, true),
                (.get, "cross-site", "navigate", "document", nil, nil, true),
                // Another site's scripts, frames and beacons.
                (.post, "cross-site", "cors", "empty", "https://evil.example", "application/json", false),
                (.post, "cross-site", "no-cors", "empty", "https://evil.example", form, false),
                (.post, "cross-site", "navigate", "iframe", "https://evil.example", form, false),
                (.post, "same-site", "cors", "empty", "https://other.parley.example", form, false),
                (.delete, "cross-site", "cors", "empty", "https://evil.example", nil, false),
                (.post, "same-origin", "cors", "empty", "https://evil.example", form, false),
                // Without Fetch Metadata: what no form can send from another origin.
                (.post, nil, nil, nil, "https://evil.example", "application/json", false),
                (.put, nil, nil, nil, "https://evil.example", form, false),
                (.patch, nil, nil, nil, "https://evil.example", nil, false),
            ]
            for (method, site, mode, dest, origin, type, passes) in cases {
                var headers: HTTPFields = [.cookie: cookie]
                if let site { headers[HTTPField.Name("Sec-Fetch-Site")!] = site }
                if let mode { headers[HTTPField.Name("Sec-Fetch-Mode")!] = mode }
                if let dest { headers[HTTPField.Name("Sec-Fetch-Dest")!] = dest }
                if let origin { headers[.origin] = origin }
                if let type { headers[.contentType] = type }
                let what = "\(method) \(site ?? "-") \(mode ?? "-") \(dest ?? "-") \(origin ?? "-") \(type ?? "-")"
                let before = upstream.count
                try await client.execute(uri: "/web/sp/acs", method: method, headers: headers, body: ByteBuffer(string: "SAMLResponse=x")) { response in
                    if passes {
                        #expect(response.status != .forbidden, "\(what)")
                        #expect(upstream.count == before + 1, "\(what) did not reach the upstream")
                    } else {
                        #expect(response.status == .forbidden, "\(what)")
                        #expect(String(buffer: response.body).contains("another site may only navigate"), "\(what)")
                        #expect(upstream.count == before, "\(what) reached the upstream")
                    }
                }
            }
        }
    }

    // MARK: 5. the binding cookie

    @Test func aBindingPlantedBesideTheRealOneTakesNothingOver() async throws {
        let upstream = BoxUpstream()
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, flows: flows) { client in
            let (_, real) = try await Self.boundBrowser(client)
            // Another registration's valid binding (the attacker's own flow), set by a page's
            // script at a deeper path: the browser sends it first, or after one at a shallower path.
            let (_, planted) = try await Self.boundBrowser(client)
            let before = upstream.count
            for header in ["\(planted); \(real)", "\(real); \(planted)", "\(planted); \(planted); \(real)", "parley_flow=junk; \(real)"] {
                let finds = flows.finds
                try await client.execute(uri: "/web/sp/deeper/page?x=1", method: .get, headers: [.cookie: header]) { response in
                    #expect(response.status == .forbidden, "\(header)")
                    #expect(String(buffer: response.body).contains("more than one sign-in"))
                    let cleared = response.headers[values: .setCookie]
                    for path in ["/web/sp/deeper/page", "/web/sp/deeper/", "/web/sp/deeper", "/web/sp/", "/web/sp", "/web/", "/web", "/"] {
                        #expect(cleared.contains("parley_flow=; Path=\(path); Max-Age=0; Secure"), "\(path)")
                        #expect(cleared.contains("parley_flow=; Path=\(path); Max-Age=0; Domain=parley.example; Secure"), "\(path)")
                    }
                    Self.expectFramingRefused(response, "a conflict")
                }
                #expect(flows.finds == finds, "two bindings cost a flow read")
            }
            #expect(upstream.count == before, "a request with two bindings reached the upstream")
            // One binding, even sent twice, counts.
            try await client.execute(uri: "/web/sp/page", method: .get, headers: [.cookie: "\(real); other=1; \(real)"]) { response in
                #expect(response.status == .ok)
            }
            #expect(upstream.count == before + 1)
        }
    }

    @Test func aBindingIsJudgedByItsFormBeforeAnyReadAndAHugeHeaderCostsAtMostTwo() async throws {
        let upstream = BoxUpstream()
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, flows: flows) { client in
            let (id, real) = try await Self.boundBrowser(client)
            let secret = String(real.dropFirst("parley_flow=\(id).".count))
            #expect(secret.utf8.count == HostedBinding.secretLength)
            let before = upstream.count
            let malformed = [
                "parley_flow=\(id).short", "parley_flow=\(id.uppercased()).\(secret)", "parley_flow=\(id).\(secret)x",
                "parley_flow=\(id).\(secret.dropLast())!", "parley_flow=\(id)-\(secret)", "parley_flow=\(id)", "parley_flow=",
                "parley_flow=\(UUID().uuidString.lowercased()).\(secret.dropLast())",
            ]
            for cookie in malformed {
                let finds = flows.finds
                try await client.execute(uri: "/web/sp/page", method: .get, headers: [.cookie: cookie]) { response in
                    #expect(response.status == .forbidden, "\(cookie)")
                }
                #expect(flows.finds == finds, "a malformed binding cost a flow read: \(cookie)")
            }
            // A 32 KiB Cookie header of well-formed bindings, different or all the same.
            let unknown = "parley_flow=\(UUID().uuidString.lowercased()).\(secret)"
            let manyDifferent = (0..<330).map { _ in "parley_flow=\(UUID().uuidString.lowercased()).\(secret)" }.joined(separator: "; ")
            let manySame = Array(repeating: unknown, count: 330).joined(separator: "; ")
            for header in [manyDifferent, manySame] {
                #expect(header.utf8.count > 30 * 1024 && header.utf8.count < 32 * 1024)
                let finds = flows.finds
                try await client.execute(uri: "/web/sp/page", method: .get, headers: [.cookie: header]) { response in
                    #expect(response.status == .forbidden)
                }
                #expect(flows.finds - finds <= 2, "a header of many bindings cost \(flows.finds - finds) flow reads")
            }
            #expect(upstream.count == before, "a request without its one valid binding reached the upstream")
        }
    }

    @Test func theBrowsersBindingNeverGoesUpAndTheUpstreamCannotSetOne() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            let (_, cookie) = try await Self.boundBrowser(client)
            try await client.execute(uri: "/web/sp/hostile", method: .get, headers: [.cookie: cookie]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[values: .setCookie].isEmpty, "the upstream's parley_flow reached the browser")
            }
            let sent = try #require(upstream.last)
            #expect(!sent.headers.contains { $0.value.contains("parley_flow") }, "the binding went upstream")
        }
    }

    // MARK: 6. client-address headers

    static let clientAddressHeaders = [
        "X-Client-IP", "Client-IP", "X-Cluster-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Forwarded", "X-Host", "X-Real-IP",
        "True-Client-IP", "X-Forwarded-For", "Forwarded",
    ]

    @Test func clientAddressHeadersReachNoUpstreamThroughTheProxyOrTheWebPath() async throws {
        let upstream = BoxUpstream()
        try await Self.withRouter(upstream) { client in
            var spoofing = HTTPFields()
            for name in Self.clientAddressHeaders { spoofing[HTTPField.Name(name)!] = "10.0.0.1" }
            spoofing[HTTPField.Name("X-Kept")!] = "yes"
            let token = try await HostedFlowRouterTests.register(client, "sp")
            var proxied = spoofing
            proxied[.authorization] = "Bearer \(token)"
            _ = try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: proxied)
            let (_, cookie) = try await Self.boundBrowser(client)
            var browser = spoofing
            browser[.cookie] = cookie
            _ = try await client.execute(uri: "/web/sp/page", method: .get, headers: browser)
            let sent = upstream.seen.withLock { $0 }
            let viaProxy = try #require(sent.first)
            let viaWeb = try #require(sent.last)
            for (what, request) in [("proxy", viaProxy), ("web", viaWeb)] {
                #expect(request.headers["X-Kept"] == "yes", "\(what)")
                for name in Self.clientAddressHeaders {
                    #expect(!request.headers.contains { $0.name.lowercased() == name.lowercased() && $0.value == "10.0.0.1" }, "\(what): \(name)")
                }
            }
        }
    }
}
