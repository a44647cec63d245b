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

/// saml2, otp and basic-form flows through the real router, against a scripted
/// upstream (a fake transport that keeps its own sessions by cookie).
@Suite struct HostedFlowRouterTests {
    /// A small SAML-protected SP with OTP and a Basic-protected API, in memory.
    final class FakeUpstream: Sendable {
        let seen = Mutex<[UpstreamRequest]>([])
        /// Upstream headers of the last request on the SP, to check the forwarded headers.
        var lastSPHeaders: HeaderFields { seen.withLock { $0.last { $0.url.contains("sp.example") }?.headers ?? [:] } }
        var count: Int { seen.withLock { $0.count } }
        let otpAfterSAML: Bool
        /// The second factor guards the API only: the SAML sign-in itself finishes without it.
        let otpForAPIOnly: Bool
        /// Where the OTP challenge of an API call sends the browser.
        let otpForm: String

        init(otpAfterSAML: Bool = false, otpForAPIOnly: Bool = false, otpForm: String = "https://sp.example/sp/otp") {
            self.otpAfterSAML = otpAfterSAML
            self.otpForAPIOnly = otpForAPIOnly
            self.otpForm = otpForm
        }

        func answer(_ request: UpstreamRequest) -> UpstreamResponse {
            seen.withLock { $0.append(request) }
            let cookie = request.headers["Cookie"] ?? ""
            guard let url = URLParts(request.url) else { return .text(400) }
            if url.host == "form.example" {
                switch request.headers["Authorization"] {
                case "Basic YWxpY2U6d29uZGVybGFuZA==": return .text(200, "{\"ok\":true}")
                case "Basic bWFsbG9yeTp4": return .text(403, "forbidden")  // mallory:x, a user it will not let in
                case "Basic Ym9iOmJ1aWxkZXI=": return .text(500, "broken")  // bob:builder, while the upstream fails
                default: return .text(401, headers: ["WWW-Authenticate": "Basic realm=\"form\""])
                }
            }
            let saml = cookie.contains("SP=ok")
            let otp = cookie.contains("OTP=ok")
            switch url.path {
            case "/sp/acs":
                if otpAfterSAML {
                    return .text(302, headers: ["Location": "/sp/otp", "x-smp-authentication": "otp-challenge", "Set-Cookie": "SP=ok; Path=/sp"])
                }
                return .text(302, headers: ["Location": "https://sp.example/sp/SAMLAuthLauncher", "Set-Cookie": "SP=ok; Path=/sp"])
            case "/sp/otp" where request.method == "POST":
                guard case .bytes(let body) = request.body, String(decoding: body, as: UTF8.self) == "passcode=123456" else {
                    return .text(200, "<form>wrong passcode</form>", headers: ["Content-Type": "text/html"])
                }
                return .text(302, headers: ["Location": "/sp/otp/finished?finished=true", "Set-Cookie": "OTP=ok; Path=/sp"])
            case "/sp/otp":
                return .text(200, "<form method=post><input name=passcode></form>", headers: ["Content-Type": "text/html"])
            default:
                guard saml else {
                    return .text(
                        200, "<html><form method=\"post\" action=\"https://idp.example/sso\"><input type=\"hidden\" name=\"SAMLRequest\" value=\"x\"></form>",
                        headers: ["Content-Type": "text/html; charset=utf-8"])
                }
                if (otpAfterSAML || (otpForAPIOnly && url.path != "/sp/SAMLAuthLauncher")) && !otp {
                    return .text(302, headers: ["Location": otpForm, "x-smp-authentication": "otp-challenge"])
                }
                if url.path == "/sp/SAMLAuthLauncher" && !(url.query ?? "").contains("finishEndpointParam") {
                    return .text(302, headers: ["Location": "https://sp.example/sp/SAMLAuthLauncher?finishEndpointParam=done"])
                }
                return .text(200, "{\"user\":\"alice\"}", headers: ["Content-Type": "application/json", "Set-Cookie": "SEEN=1; Path=/sp"])
            }
        }
    }

    static func configuration() throws -> ParleyConfiguration {
        var sp = DestinationSpec(name: "sp", url: "https://sp.example/sp")
        sp.saml2 = .init()
        sp.otp = .init()
        var form = DestinationSpec(name: "form", url: "https://form.example", basic: .init(form: true))
        form.displayName = "Forms & Co <HR>"
        return ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [try sp.validated(), try form.validated()])
    }

    static func withRouter(
        _ upstream: FakeUpstream, registrations: InMemoryRegistrations = InMemoryRegistrations(), flows: InMemoryFlows = InMemoryFlows(),
        clock: TestClock = TestClock(), _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { upstream.answer($0) }, clock: clock)
        dependencies.registrations = registrations
        dependencies.flows = flows
        let app = try buildApplication(configuration: try configuration(), dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func register(_ client: any TestClientProtocol, _ destination: String) async throws -> String {
        try await client.execute(
            uri: "/v1/registrations", method: .post, body: ByteBuffer(string: "{\"destination\":\"\(destination)\"}")
        ) { response in
            #expect(response.status == .created)
            return RouterTests.json(response.body)["clientToken"] as? String ?? ""
        }
    }

    /// The `interaction_required` answer of a proxied call: (flow id, path of the flow URL).
    static func interaction(_ client: any TestClientProtocol, token: String, path: String, kind: String) async throws -> (String, String) {
        try await client.execute(uri: path, method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
            RouterTests.expectProblem(response, .unauthorized, "interaction_required")
            let flow = RouterTests.json(response.body)["flow"] as? [String: Any] ?? [:]
            #expect(flow["kind"] as? String == kind)
            let url = flow["url"] as? String ?? ""
            #expect(response.headers[HTTPField.Name("Parley-Flow")!] == url)
            return (flow["id"] as? String ?? "", String(url.dropFirst("https://parley.example".count)))
        }
    }

    static func cookie(_ response: TestResponse) -> String {
        let setCookie = response.headers[values: .setCookie].first { $0.hasPrefix("parley_flow=") } ?? ""
        return String(setCookie.split(separator: ";").first ?? "")
    }

    // MARK: saml2

    @Test func saml2FlowThroughTheHostedUpstream() async throws {
        let upstream = FakeUpstream()
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, flows: flows) { client in
            let token = try await Self.register(client, "sp")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")

            // The start page (once confirmed) binds the browser and opens the finish endpoint first.
            let binding = try await FlowConfirmationRouterTests.confirm(client, start) { response in
                #expect(FlowConfirmationRouterTests.onward(response) == "https://parley.example/web/sp/SAMLAuthLauncher")
                let setCookie = response.headers[values: .setCookie].first { $0.hasPrefix("parley_flow=") } ?? ""
                for attribute in ["Path=/web/sp/", "HttpOnly", "Secure", "SameSite=None", "Max-Age=600"] {
                    #expect(setCookie.contains(attribute), "\(attribute)")
                }
                return Self.cookie(response)
            }
            #expect(binding.hasPrefix("parley_flow=\(id)."))

            // Without a binding, or with a forged one, nothing is forwarded.
            let before = upstream.count
            for cookie in [nil, "parley_flow=\(id).forged", "parley_flow=\(UUID().uuidString).x", "other=1"] {
                var headers: HTTPFields = [:]
                if let cookie { headers[.cookie] = cookie }
                try await client.execute(uri: "/web/sp/SAMLAuthLauncher", method: .get, headers: headers) { response in
                    #expect(response.status == .forbidden)
                    #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                    #expect(response.headers[.contentSecurityPolicy]?.contains("frame-ancestors 'none'") == true)
                }
            }
            // A binding on another destination's path is not this destination's.
            #expect(try await client.execute(uri: "/web/form/x", method: .get, headers: [.cookie: binding]).status == .forbidden)
            #expect(upstream.count == before, "a request without a valid binding reached the upstream")

            let browser: HTTPFields = [.cookie: binding]
            // The SP challenges; its page passes through (the IdP is visited directly).
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher", method: .get, headers: browser) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains("SAMLRequest"))
            }
            let forwarded = upstream.lastSPHeaders
            #expect(forwarded["X-Forwarded-Proto"] == "https")
            #expect(forwarded["X-Forwarded-Host"] == "parley.example")
            #expect(forwarded["X-Forwarded-Prefix"] == "/web/sp")
            #expect(forwarded["Cookie"] == nil, "the browser's binding cookie went upstream")

            // The IdP posts to the ACS: the session cookie lands in the jar, not the browser;
            // the upstream-origin Location is mapped into the web path.
            try await client.execute(uri: "/web/sp/acs", method: .post, headers: browser, body: ByteBuffer(string: "SAMLResponse=x")) { response in
                #expect(response.status == .found)
                #expect(response.headers[.location] == "https://parley.example/web/sp/SAMLAuthLauncher")
                #expect(response.headers[values: .setCookie].isEmpty)
            }
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher", method: .get, headers: browser) { response in
                #expect(response.status == .found)
                #expect(response.headers[.location] == "https://parley.example/web/sp/SAMLAuthLauncher?finishEndpointParam=done")
            }
            // The finish endpoint with the parameter and no challenge: the flow completes.
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: browser) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
                #expect(response.headers[values: .setCookie].contains { $0.hasPrefix("parley_flow=;") && $0.contains("Max-Age=0") })
            }
            #expect(flows.all.first { $0.idString == id }?.status == .completed)
            // The binding of a finished flow leads to the completion page.
            try await client.execute(uri: "/web/sp/api/data", method: .get, headers: browser) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            // The thin client's retried call succeeds on the captured session; no cookie reaches it.
            try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[values: .setCookie].isEmpty)
            }
        }
    }

    @Test func theWebPathRefusesEscapesAndExpiredFlows() async throws {
        let upstream = FakeUpstream()
        let clock = TestClock()
        try await Self.withRouter(upstream, clock: clock) { client in
            let token = try await Self.register(client, "sp")
            let (_, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            let browser: HTTPFields = [.cookie: try await FlowConfirmationRouterTests.confirm(client, start) { Self.cookie($0) }]
            let before = upstream.count
            // Only the destination's own URL is reachable: escapes are refused as pages.
            for path in ["/web/sp/%2e%2e/admin", "/web/sp/a/..;x/b", "/web/sp/a%2fb", "/web/sp//evil.example/x", "/web/sp/%0d%0aX:1"] {
                let response = try await client.execute(uri: path, method: .get, headers: browser)
                #expect(response.status == .badRequest, "\(path)")
                #expect(response.headers[.contentType] == "text/html; charset=utf-8")
            }
            #expect(upstream.count == before, "an escaping path reached the upstream")
            // Past its expiry the binding leads to the expired page, and nothing is forwarded.
            clock.advance(by: .seconds(601))
            try await client.execute(uri: "/web/sp/api/data", method: .get, headers: browser) { response in
                #expect(response.status == .gone)
                #expect(String(buffer: response.body).contains("data-parley-error=\"flow_expired\""))
            }
            #expect(upstream.count == before)
        }
    }

    @Test func secondFactorInsideTheBrowserFlowFinishesAtTheOTPFinish() async throws {
        let upstream = FakeUpstream(otpAfterSAML: true)
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, flows: flows) { client in
            let token = try await Self.register(client, "sp")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            let browser: HTTPFields = [.cookie: try await FlowConfirmationRouterTests.confirm(client, start) { Self.cookie($0) }]
            try await client.execute(uri: "/web/sp/acs", method: .post, headers: browser, body: ByteBuffer(string: "SAMLResponse=x")) { response in
                #expect(response.status == .found)
                #expect(response.headers[.location] == "https://parley.example/web/sp/otp?redirecttooriginalurl=false")
            }
            // The saml2 kind's own (sealed) state remembers the OTP form it now waits at.
            let state = FlowKindState<SAML2Flow.State>(flows: flows, secrets: Secrets(keyRing: testKeyRing()))
            let flow = try #require(flows.all.first { $0.idString == id })
            #expect(try state.read(flow)?.otpForm == "https://sp.example/sp/otp?redirecttooriginalurl=false")
            // The SAML finish no longer ends the flow while the second factor is open.
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: browser) { response in
                #expect(response.status == .found)
            }
            #expect(flows.all.first { $0.idString == id }?.status == .pending)
            try await client.execute(
                uri: "/web/sp/otp?redirecttooriginalurl=false", method: .post, headers: browser, body: ByteBuffer(string: "passcode=000000")
            ) { response in #expect(response.status == .ok) }
            #expect(flows.all.first { $0.idString == id }?.status == .pending)
            try await client.execute(
                uri: "/web/sp/otp?redirecttooriginalurl=false", method: .post, headers: browser, body: ByteBuffer(string: "passcode=123456")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            #expect(flows.all.first { $0.idString == id }?.status == .completed)
            #expect(try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: [.authorization: "Bearer \(token)"]).status == .ok)
        }
    }

    /// What the upstream sets through `/web/…` waits with the flow: the registration's API
    /// calls see none of it until the flow completes, and a flow that ends otherwise drops it.
    @Test func cookiesSetDuringAFlowWaitForItsCompletion() async throws {
        let upstream = FakeUpstream()
        let flows = InMemoryFlows()
        let clock = TestClock()
        try await Self.withRouter(upstream, flows: flows, clock: clock) { client in
            let auth = { (token: String) -> HTTPFields in [.authorization: "Bearer \(token)"] }
            // Completed: staged during the flow, committed at its end.
            let token = try await Self.register(client, "sp")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            let browser: HTTPFields = [.cookie: try await FlowConfirmationRouterTests.confirm(client, start) { Self.cookie($0) }]
            _ = try await client.execute(uri: "/web/sp/acs", method: .post, headers: browser, body: ByteBuffer(string: "SAMLResponse=x"))
            #expect(flows.all.first { $0.idString == id }?.stagedCookies != nil, "the SP's session cookie is staged with the flow")
            try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: auth(token)) { response in
                RouterTests.expectProblem(response, .unauthorized, "interaction_required")
            }
            // The flow's own browser already uses it: the finish endpoint sees the session.
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: browser) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            #expect(flows.all.first { $0.idString == id }?.stagedCookies == nil)
            #expect(try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: auth(token)) { $0.status } == .ok)

            // Expired: what it staged never reaches the registration.
            let other = try await Self.register(client, "sp")
            let (_, otherStart) = try await Self.interaction(client, token: other, path: "/v1/proxy/api/data", kind: "saml2")
            let otherBrowser: HTTPFields = [.cookie: try await FlowConfirmationRouterTests.confirm(client, otherStart) { Self.cookie($0) }]
            _ = try await client.execute(uri: "/web/sp/acs", method: .post, headers: otherBrowser, body: ByteBuffer(string: "SAMLResponse=x"))
            clock.advance(by: .seconds(Int64(FlowService.lifetime) + 1))
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: otherBrowser) { response in
                #expect(response.status == .gone)
            }
            try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: auth(other)) { response in
                RouterTests.expectProblem(response, .unauthorized, "interaction_required")
            }
        }
    }

    /// A client retrying a challenged call gets the same pending flow, not a new one each time;
    /// once that flow has ended (completed, expired), the next challenge opens a new one.
    @Test func aChallengedCallReusesThePendingFlowOfItsKind() async throws {
        let upstream = FakeUpstream()
        let flows = InMemoryFlows()
        let clock = TestClock()
        try await Self.withRouter(upstream, flows: flows, clock: clock) { client in
            let token = try await Self.register(client, "sp")
            let (first, firstURL) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            let (again, againURL) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/other", kind: "saml2")
            #expect(again == first)
            #expect(againURL == firstURL, "the same link, secret included")
            #expect(flows.all.count == 1)

            // Completed: the next challenge is a new flow.
            let id = try #require(UUID(uuidString: first))
            #expect(try await flows.finish(id: id, status: .completed, error: nil, at: clock.now))
            clock.advance(by: .seconds(1))
            let (second, _) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            #expect(second != first)
            #expect(try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2").0 == second)

            // Expired (or about to, with less than a minute left): a new one too.
            clock.advance(by: .seconds(Int64(FlowService.lifetime - FlowStarter.reuseMargin) + 1))
            let (third, _) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
            #expect(third != second && third != first)
            #expect(flows.all.count == 3)

            // Another registration never gets this one's flow.
            let other = try await Self.register(client, "sp")
            #expect(try await Self.interaction(client, token: other, path: "/v1/proxy/api/data", kind: "saml2").0 != third)
        }
    }

    // MARK: otp

    /// A SAML sign-in through the hosted upstream, to its end (its cookies reach the registration then).
    static func signInWithSAML(_ client: any TestClientProtocol, token: String) async throws {
        let (_, samlStart) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "saml2")
        let browser: HTTPFields = [.cookie: try await FlowConfirmationRouterTests.confirm(client, samlStart) { Self.cookie($0) }]
        _ = try await client.execute(uri: "/web/sp/acs", method: .post, headers: browser, body: ByteBuffer(string: "SAMLResponse=x"))
        try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: browser) { response in
            #expect(response.status == .seeOther, "the SAML flow completes at its finish")
        }
    }

    @Test func otpMetByAnAPICallIsAnOTPFlowThatTheCallbackCompletes() async throws {
        let upstream = FakeUpstream(otpForAPIOnly: true)
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, flows: flows) { client in
            let token = try await Self.register(client, "sp")
            // First the SAML sign-in, to reach the second factor.
            try await Self.signInWithSAML(client, token: token)
            // Now the API call meets the OTP challenge on its own: an otp flow.
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "otp")
            let (k, binding) = try await FlowConfirmationRouterTests.confirm(client, start) { response in
                #expect(FlowConfirmationRouterTests.onward(response) == "https://parley.example/web/sp/otp?redirecttooriginalurl=false")
                return (String(start.split(separator: "k=").last ?? ""), Self.cookie(response))
            }
            #expect(!binding.isEmpty)
            try await client.execute(uri: "/callback/otp?flow=\(id)&k=\(k)&passcode=000000", method: .get) { response in
                #expect(response.status == .badRequest)
                #expect(String(buffer: response.body).contains("data-parley-error=\"invalid_request\""))
            }
            try await client.execute(uri: "/callback/otp?flow=\(id)&k=wrong&passcode=123456", method: .get) { response in
                #expect(response.status == .notFound)
            }
            #expect(flows.all.first { $0.idString == id }?.status == .pending)
            try await client.execute(
                uri: "/callback/otp", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "flow=\(id)&k=\(k)&passcode=123456")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            #expect(flows.all.first { $0.idString == id }?.status == .completed)
            #expect(try await client.execute(uri: "/v1/proxy/api/data", method: .get, headers: [.authorization: "Bearer \(token)"]).status == .ok)
        }
    }

    @Test func theOTPCallbackPostsOnlyUnderTheDestination() async throws {
        let upstream = FakeUpstream(otpForAPIOnly: true, otpForm: "https://internal.example/admin/otp")
        try await Self.withRouter(upstream) { client in
            let token = try await Self.register(client, "sp")
            try await Self.signInWithSAML(client, token: token)
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api/data", kind: "otp")
            let k = String(start.split(separator: "k=").last ?? "")
            try await client.execute(uri: "/callback/otp?flow=\(id)&k=\(k)&passcode=123456", method: .get) { response in
                #expect(response.status == .notFound)
            }
            #expect(!upstream.seen.withLock { $0 }.contains { $0.url.contains("internal.example") }, "Parley posted outside the destination")
        }
    }

    // MARK: basic form

    @Test func basicFormWrongThenRightCredentials() async throws {
        let upstream = FakeUpstream()
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        try await Self.withRouter(upstream, registrations: registrations, flows: flows) { client in
            let token = try await Self.register(client, "form")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api", kind: "basic")
            let k = String(start.split(separator: "k=").last ?? "")
            try await FlowConfirmationRouterTests.confirm(client, start) { response in
                #expect(response.status == .ok)
                let page = String(buffer: response.body)
                #expect(page.contains("<label for=\"username\">") && page.contains("type=\"password\""))
                #expect(page.contains("action=\"/flows/\(id)/credentials\""))
                #expect(page.contains("<h1>Sign in to Forms &amp; Co &lt;HR&gt;</h1>"), "the form names the destination by its displayName")
                #expect(response.headers[.contentSecurityPolicy]?.contains("form-action 'self'") == true)
            }
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            // Another site cannot post the form.
            var crossSite = form
            crossSite[.origin] = "https://evil.example"
            #expect(
                try await client.execute(
                    uri: "/flows/\(id)/credentials", method: .post, headers: crossSite,
                    body: ByteBuffer(string: "k=\(k)&username=alice&password=wonderland")
                ).status == .forbidden)
            try await client.execute(
                uri: "/flows/\(id)/credentials", method: .post, headers: form, body: ByteBuffer(string: "k=\(k)&username=alice&password=wrong-secret")
            ) { response in
                #expect(response.status == .ok)
                let page = String(buffer: response.body)
                #expect(page.contains("role=\"alert\""))
                #expect(!page.contains("wrong-secret"), "a password was put back into the page")
            }
            #expect(registrations.all.first?.credentialsSealed == nil)
            try await client.execute(
                uri: "/flows/\(id)/credentials", method: .post, headers: form, body: ByteBuffer(string: "k=\(k)&username=alice&password=wonderland")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            #expect(flows.all.first { $0.idString == id }?.status == .completed)
            let sealed = try #require(registrations.all.first?.credentialsSealed)
            #expect(!String(decoding: sealed, as: UTF8.self).contains("wonderland"))
            #expect(try await client.execute(uri: "/v1/proxy/api", method: .get, headers: [.authorization: "Bearer \(token)"]).status == .ok)
        }
    }

    /// A sign-in is what the upstream answers a signed-in user: a 2xx or 3xx. A 403 or a 5xx to
    /// the form's credentials is no sign-in, and nothing is kept.
    @Test func basicFormTakesOnlyAnAnswerASignedInUserGets() async throws {
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        try await Self.withRouter(FakeUpstream(), registrations: registrations, flows: flows) { client in
            let token = try await Self.register(client, "form")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api", kind: "basic")
            let k = String(start.split(separator: "k=").last ?? "")
            try await FlowConfirmationRouterTests.confirm(client, start) { #expect($0.status == .ok) }
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            for credentials in ["username=mallory&password=x", "username=bob&password=builder"] {
                try await client.execute(
                    uri: "/flows/\(id)/credentials", method: .post, headers: form, body: ByteBuffer(string: "k=\(k)&\(credentials)")
                ) { response in
                    #expect(response.status == .ok, "\(credentials)")
                    #expect(String(buffer: response.body).contains("role=\"alert\""), "\(credentials): the form again, with its error")
                }
            }
            #expect(registrations.all.first?.credentialsSealed == nil)
            #expect(registrations.all.first?.user == nil, "a refused sign-in bound the registration")
            #expect(flows.all.first { $0.idString == id }?.status == .pending)
        }
    }

    @Test func basicFormLocksAfterRepeatedFailures() async throws {
        let flows = InMemoryFlows()
        try await Self.withRouter(FakeUpstream(), flows: flows) { client in
            let token = try await Self.register(client, "form")
            let (id, start) = try await Self.interaction(client, token: token, path: "/v1/proxy/api", kind: "basic")
            let k = String(start.split(separator: "k=").last ?? "")
            for attempt in 1...BasicFormFlow.maxAttempts {
                try await client.execute(
                    uri: "/flows/\(id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: "k=\(k)&username=alice&password=nope\(attempt)")
                ) { response in
                    #expect(response.status == (attempt < BasicFormFlow.maxAttempts ? .ok : .seeOther))
                }
            }
            #expect(flows.all.first { $0.idString == id }?.status == .failed)
            try await client.execute(uri: "/flows/\(id)/done", method: .get) { response in
                #expect(response.status == .forbidden)
                #expect(String(buffer: response.body).contains("data-parley-flow-status=\"failed\""))
            }
            // A failed flow takes no more credentials.
            try await client.execute(
                uri: "/flows/\(id)/credentials", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "k=\(k)&username=alice&password=wonderland")
            ) { response in #expect(response.status == .seeOther) }
            #expect(flows.all.first { $0.idString == id }?.status == .failed)
        }
    }

    @Test func proactiveFlowsOfferSAML2FirstThenBasicForm() async throws {
        try await Self.withRouter(FakeUpstream()) { client in
            for (destination, kind) in [("sp", "saml2"), ("form", "basic")] {
                let token = try await Self.register(client, destination)
                try await client.execute(
                    uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)"], body: ByteBuffer(string: "{}")
                ) { response in
                    #expect(response.status == .created)
                    #expect(RouterTests.json(response.body)["kind"] as? String == kind)
                }
            }
        }
    }
}
