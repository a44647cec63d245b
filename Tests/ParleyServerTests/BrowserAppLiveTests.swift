import AuthFlows
import Foundation
import Hummingbird
import ParleyDomain
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

@testable import ParleyServer

/// A browser app, live: headless Chromium runs a single-page app served from another origin
/// (another port) that uses Parley's ES module (`/sdk/parley.js`) against the real server
/// object, real PostgreSQL and the simulator: it registers with a Basic + CSRF destination and
/// an OAuth2 authorization-code one, is sent to sign in and comes back, and its call answers
/// 200. Nothing of Parley's is readable by the page; a page of a third origin can neither read
/// an answer nor make a state-changing call, and nothing of its attempts reaches the upstream;
/// the flow URL opened in another browser profile is refused and leaves Parley for nowhere;
/// logout expires the cookie; a back-channel logout ends the session.
@Suite(.serialized) struct BrowserAppLiveTests {
    /// The app's page: the module loaded from Parley, and a hook that records where it sends the
    /// window (it still goes there, as the module's default does).
    static func appPage(parley: String) -> String {
        """
        <!doctype html>
        <html><head><meta charset="utf-8"><title>shop</title></head><body><main>shop</main>
        <script type="module">
          import { Parley, ParleyError } from "\(parley)/sdk/parley.js";
          let resolveNavigation;
          window.navigated = new Promise((resolve) => { resolveNavigation = resolve; });
          window.parley = new Parley({
            url: "\(parley)",
            navigate: (url) => { resolveNavigation(url); setTimeout(() => window.location.assign(url), 0); },
          });
          window.ParleyError = ParleyError;
          window.dispatchEvent(new Event("parley-ready"));
        </script></body></html>
        """
    }

    /// Waits (in the page) until the module has loaded, then runs `body`.
    static func inApp(_ body: String) -> String {
        "if (!window.parley) await new Promise((ready) => addEventListener(\"parley-ready\", ready, { once: true }));\n" + body
    }

    static let audience = IdentityBindingLiveTests.audience

    @Test func aSinglePageAppOfAnotherOriginSignsInAndNeverHoldsAToken() async throws {
        let site = try await StaticSite.start()
        defer { site.stop() }
        let appOrigin = "http://127.0.0.1:\(site.port)"
        let returnURL = appOrigin + "/app.html"
        try await withLiveParley(
            destinations: { url in
                [DestinationSpec(name: "shop-basic", url: url, csrf: true, basic: .init()), IdentityBindingLiveTests.openIDDestination(url)]
            },
            options: LiveOptions(fixedPorts: true),
            adjust: { configuration in
                IdentityBindingLiveTests.simulatorIdentityProvider(&configuration)
                let (app, problems) = BrowserAppSpec(name: "shop", origins: [appOrigin], destinations: ["shop-basic", "as"], returnUrls: [returnURL])
                    .validated(at: "browserApps[0]", destinations: ["shop-basic", "as"])
                configuration.browserApps = app.map { [$0] } ?? []
                #expect(problems.isEmpty, "\(problems)")
            }
        ) { live in
            site.set("/app.html", Self.appPage(parley: live.baseURL))
            site.set("/evil.html", "<!doctype html><html><head><meta charset=\"utf-8\"><title>evil</title></head><body></body></html>")
            let identityToken = try await IdentityBindingLiveTests.identityToken(live, subject: "alice")
            func upstreamRequests() -> Int { live.simulator.requestsByRoute.values.reduce(0, +) }

            try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: returnURL)
                // Basic + CSRF: the registration holds the user's credentials; the call is answered.
                let basic = try await browser.evaluate(
                    Self.inApp(
                        """
                        const registration = await parley.register({ destination: "shop-basic", identityToken: "\(identityToken)",
                          credentials: { username: "alice", password: "wonderland" } });
                        const answer = await parley.fetch("csrf/items", { method: "POST", headers: { "Content-Type": "application/json" },
                          body: JSON.stringify({ item: 1 }) });
                        return { status: registration.status, token: registration.clientToken ?? null, call: answer.status,
                          readable: document.cookie, local: localStorage.length, session: sessionStorage.length };
                        """))
                let first = try #require(try JSONSerialization.jsonObject(with: Data(basic.utf8)) as? [String: Any], "\(basic)")
                #expect(first["status"] as? String == "active" && first["token"] is NSNull, "\(basic)")
                #expect(first["call"] as? Int == 201, "\(basic)")
                #expect(first["readable"] as? String == "" && first["local"] as? Int == 0 && first["session"] as? Int == 0, "\(basic)")
                #expect(live.simulator.smp.csrfFetches >= 1)

                // Logout expires the cookie: the browser has no registration any more.
                let loggedOut = try await browser.evaluate(Self.inApp("await parley.logout(); return await parley.registration();"))
                #expect(loggedOut == "null")

                // OAuth2 authorization code: the call sends the window to the flow; the person signs
                // in at the authorization server, the window comes back, and the call answers 200.
                let started = try await browser.evaluate(
                    Self.inApp(
                        """
                        const registration = await parley.register({ destination: "as", identityToken: "\(identityToken)", returnUrl: "\(returnURL)" });
                        const outcome = await Promise.race([
                          parley.fetch("oauth-api/orders").then((answer) => ({ status: answer.status })),
                          window.navigated.then((url) => ({ flow: url })),
                        ]);
                        return { registration: registration.status, ...outcome };
                        """))
                let navigation = try #require(try JSONSerialization.jsonObject(with: Data(started.utf8)) as? [String: Any], "\(started)")
                let flowURL = try #require(navigation["flow"] as? String, "the call went to the flow: \(started)")
                #expect(flowURL.hasPrefix(live.baseURL + "/flows/"))
                try await browser.waitForURL(prefix: "http://127.0.0.1:\(live.simulatorPort)/oauth/authorize", timeout: .seconds(20))
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "#login"))
                let back = try await browser.waitForURL(prefix: returnURL + "?", timeout: .seconds(20))
                #expect(back.contains("status=completed"), "\(back)")
                let retried = try await browser.evaluate(
                    Self.inApp("const answer = await parley.fetch(\"oauth-api/orders\"); return { status: answer.status, readable: document.cookie };"))
                #expect(retried.contains("\"status\":200") && retried.contains("\"readable\":\"\""), "\(retried)")

                // The flow URL opened in another browser profile: a page, and Parley contacts nobody.
                let pending = try await browser.evaluate(
                    Self.inApp(
                        """
                        const answer = await fetch(parley.url + "/v1/flows", { method: "POST", credentials: "include",
                          headers: { "Parley-CSRF": "1", "Content-Type": "application/json" }, body: "{}" });
                        return (await answer.json()).url;
                        """))
                let pendingURL = try #require(try JSONSerialization.jsonObject(with: Data(pending.utf8), options: .fragmentsAllowed) as? String)
                let authorizations = live.simulator.requests(route: "GET /oauth/authorize")
                try await ChromeDriver.withSession { other in
                    try await other.navigate(to: pendingURL)
                    let page = try await other.pageSource()
                    #expect(page.contains("data-parley-error=\"forbidden\""), "\(page.prefix(400))")
                    #expect(try await other.currentURL().hasPrefix(live.baseURL + "/flows/"))
                }
                #expect(live.simulator.requests(route: "GET /oauth/authorize") == authorizations, "the other profile's visit left Parley")

                // A third origin (localhost is another site than 127.0.0.1): it can read no answer and
                // make no state-changing call, and nothing of its attempts reaches the upstream.
                let before = upstreamRequests()
                try await browser.navigate(to: "http://localhost:\(site.port)/evil.html")
                let evil = try await browser.evaluate(
                    """
                    const parley = "\(live.baseURL)";
                    const read = await fetch(parley + "/v1/proxy/oauth-api/orders", { credentials: "include" })
                      .then((answer) => "read " + answer.status, (error) => "refused");
                    const withHeader = await fetch(parley + "/v1/proxy/csrf/items", { method: "POST", credentials: "include",
                      headers: { "Parley-CSRF": "1", "Content-Type": "application/json" }, body: "{}" })
                      .then((answer) => "sent " + answer.status, (error) => "refused");
                    const frame = document.createElement("iframe");
                    frame.name = "sink";
                    document.body.appendChild(frame);
                    const form = document.createElement("form");
                    form.method = "POST";
                    form.action = parley + "/v1/proxy/csrf/items";
                    form.target = "sink";
                    const field = document.createElement("input");
                    field.name = "item";
                    field.value = "1";
                    form.appendChild(field);
                    document.body.appendChild(form);
                    await new Promise((loaded) => { frame.onload = loaded; form.submit(); });
                    return { read, withHeader };
                    """)
                #expect(evil.contains("\"read\":\"refused\"") && evil.contains("\"withHeader\":\"refused\""), "\(evil)")
                #expect(upstreamRequests() == before, "a third origin's attempt reached the upstream")

                // The identity provider ends alice's sessions: the app's cookie names nothing any more.
                let logout = try await IdentityTokenLiveTests.mint(
                    live.simulatorPort,
                    [
                        "sub": "alice", "aud": Self.audience, "typ": "logout+jwt",
                        "jsonClaims": ["jti": UUID().uuidString, "events": ["http://schemas.openid.net/event/backchannel-logout": [String: Any]()]],
                    ])
                let ended = try await RawHTTP.request(
                    port: live.port, method: "POST", target: "/backchannel-logout", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                    body: Array("logout_token=\(logout)".utf8))
                #expect(ended.status == 200, "\(ended.text)")
                try await browser.navigate(to: returnURL)
                #expect(try await browser.evaluate(Self.inApp("return await parley.registration();")) == "null")
            }
        }
    }
}

/// A static web site on a loopback port, for a browser app's pages: `set` a path's HTML.
final class StaticSite: Sendable {
    let port: Int
    private let pages: Pages
    private let task: Task<Void, any Error>

    final class Pages: Sendable {
        let pages = Mutex<[String: String]>([:])
    }

    private init(port: Int, pages: Pages, task: Task<Void, any Error>) {
        self.port = port
        self.pages = pages
        self.task = task
    }

    static func start() async throws -> StaticSite {
        let pages = Pages()
        let router = Router()
        router.get("**") { request, _ -> Response in
            guard let html = pages.pages.withLock({ $0[request.uri.path] }) else { return Response(status: .notFound) }
            return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: html)))
        }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) })
        let task = Task { try await app.runService(gracefulShutdownSignals: []) }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw RawHTTPError(description: "the static site did not start")
        }
        return StaticSite(port: port, pages: pages, task: task)
    }

    func set(_ path: String, _ html: String) { pages.pages.withLock { $0[path] = html } }

    func stop() { task.cancel() }
}
