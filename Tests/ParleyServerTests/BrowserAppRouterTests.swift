import AuthFlows
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import ParleyDomain
import ParleyTesting
import Testing

@testable import ParleyServer

/// Browser apps on the router (docs/api.md, "Browser apps"): a `"browser": true` registration
/// gets its client token as an `HttpOnly` cookie and never in the answer; a call that cookie
/// authenticates needs `Parley-CSRF: 1` from the app's origins; CORS answers the apps' origins
/// only; a browser registration's flow starts only in the browser holding its cookie; logout
/// expires the cookie.
@Suite struct BrowserAppRouterTests {
    static let app = "https://app.example"
    static let other = "https://evil.example"

    static func configuration() throws -> ParleyConfiguration {
        var configuration = try RouterTests.configuration()
        let spec = BrowserAppSpec(name: "shop", origins: [app], destinations: ["sim", "as"], returnUrls: [app + "/back"])
        let (checked, problems) = spec.validated(at: "browserApps[0]", destinations: ["sim", "as"])
        #expect(problems.isEmpty, "\(problems)")
        configuration.browserApps = [try #require(checked)]
        return configuration
    }

    static func withRouter(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let app = try buildApplication(configuration: try configuration(), dependencies: .inMemory(), logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func headers(origin: String? = app, csrf: Bool = true, cookie: String? = nil, json: Bool = false) -> HTTPFields {
        var fields = HTTPFields()
        if let origin { fields[.origin] = origin }
        if csrf { fields[HTTPField.Name("Parley-CSRF")!] = "1" }
        if let cookie { fields[.cookie] = cookie }
        if json { fields[.contentType] = "application/json" }
        return fields
    }

    /// Registers as the browser app; returns the registration's id and its cookie (`name=value`).
    static func register(
        _ client: any TestClientProtocol, destination: String = "sim", returnUrl: String? = nil
    ) async throws -> (id: String, cookie: String) {
        var body: [String: Any] = ["destination": destination, "browser": true, "credentials": ["username": "u", "password": "p"]]
        if let returnUrl { body["returnUrl"] = returnUrl }
        return try await client.execute(
            uri: "/v1/registrations", method: .post, headers: headers(json: true), body: RouterTests.body(body)
        ) { response in
            #expect(response.status == .created, "\(String(buffer: response.body))")
            let object = RouterTests.json(response.body)
            #expect(object["clientToken"] is NSNull || object["clientToken"] == nil, "no client token in the answer")
            #expect(!String(buffer: response.body).contains("pct_"), "no token anywhere in the answer")
            let set = response.headers[values: .setCookie]
            #expect(set.count == 1, "\(set)")
            let cookie = try #require(set.first)
            #expect(cookie.hasPrefix("__Host-parley=pct_"))
            for attribute in ["; Secure", "; HttpOnly", "; Path=/", "; SameSite=Lax"] { #expect(cookie.contains(attribute), "\(attribute)") }
            #expect(response.headers[.accessControlAllowOrigin] == app)
            #expect(response.headers[.accessControlAllowCredentials] == "true")
            return (object["id"] as? String ?? "", String(cookie.split(separator: ";")[0]))
        }
    }

    @Test func aBrowserRegistrationHoldsItsTokenInACookieNoScriptReads() async throws {
        try await Self.withRouter { client in
            let (id, cookie) = try await Self.register(client)
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(cookie: cookie)) { response in
                #expect(response.status == .ok)
                #expect(RouterTests.json(response.body)["id"] as? String == id)
                #expect(response.headers[.accessControlAllowOrigin] == Self.app)
                #expect(response.headers[.accessControlExposeHeaders]?.contains("Parley-Flow") == true)
                #expect(response.headers[.vary]?.contains("Origin") == true)
            }
            // A script's call from no page at all (no Origin) with the header is the app's too.
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(origin: nil, cookie: cookie)) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.accessControlAllowOrigin] == nil)
            }
        }
    }

    @Test func withoutTheHeaderOrFromAnotherOriginNothingIsDone() async throws {
        try await Self.withRouter { client in
            let (_, cookie) = try await Self.register(client)
            for headers in [Self.headers(csrf: false, cookie: cookie), Self.headers(origin: Self.other, cookie: cookie)] {
                for (uri, method) in [("/v1/registrations/me", HTTPRequest.Method.get), ("/v1/proxy/anything", .post), ("/v1/registrations/me", .delete)] {
                    try await client.execute(uri: uri, method: method, headers: headers) { response in
                        #expect(response.status == .forbidden, "\(method) \(uri)")
                        #expect(RouterTests.json(response.body)["code"] as? String == "forbidden")
                    }
                }
            }
            // Still there: the refused DELETEs did nothing.
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(cookie: cookie)) { response in
                #expect(response.status == .ok)
            }
            // Another origin's answers carry no Access-Control-* header.
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(origin: Self.other, cookie: cookie)) {
                response in
                #expect(response.headers[.accessControlAllowOrigin] == nil && response.headers[.accessControlAllowCredentials] == nil)
            }
        }
    }

    @Test func aBrowserRegistrationComesOnlyFromTheAppsOriginWithTheHeader() async throws {
        try await Self.withRouter { client in
            let cases: [(HTTPFields, String)] = [
                (Self.headers(csrf: false, json: true), "sim"), (Self.headers(origin: Self.other, json: true), "sim"),
                (Self.headers(origin: nil, json: true), "sim"),
            ]
            for (headers, destination) in cases {
                try await client.execute(
                    uri: "/v1/registrations", method: .post, headers: headers, body: RouterTests.body(["destination": destination, "browser": true])
                ) { response in
                    #expect(response.status == .forbidden)
                    #expect(response.headers[values: .setCookie].isEmpty)
                }
            }
            // A return URL must be one of the app's.
            try await client.execute(
                uri: "/v1/registrations", method: .post, headers: Self.headers(json: true),
                body: RouterTests.body(["destination": "sim", "browser": true, "returnUrl": Self.other + "/back"])
            ) { response in
                #expect(response.status == .badRequest)
            }
        }
    }

    @Test func aCookieIsABrowserAppsCredentialOnlyAndAnAuthorizationHeaderWins() async throws {
        try await Self.withRouter { client in
            let (browserID, cookie) = try await Self.register(client)
            let (plainID, token) = try await RouterTests.register(client)
            // A thin client's token in the cookie's place is no session.
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(cookie: "__Host-parley=" + token)) { response in
                #expect(response.status == .unauthorized)
            }
            var both = Self.headers(cookie: cookie)
            both[.authorization] = "Bearer " + token
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: both) { response in
                #expect(RouterTests.json(response.body)["id"] as? String == plainID)
            }
            #expect(browserID != plainID)
        }
    }

    @Test func corsAnswersTheAppsOriginsOnly() async throws {
        try await Self.withRouter { client in
            var preflight = HTTPFields()
            preflight[.origin] = Self.app
            preflight[.accessControlRequestMethod] = "POST"
            preflight[.accessControlRequestHeaders] = "parley-csrf, content-type"
            try await client.execute(uri: "/v1/proxy/orders", method: .options, headers: preflight) { response in
                #expect(response.status == .noContent)
                #expect(response.headers[.accessControlAllowOrigin] == Self.app)
                #expect(response.headers[.accessControlAllowCredentials] == "true")
                for header in ["Content-Type", "Parley-CSRF", "Prefer"] {
                    #expect(response.headers[.accessControlAllowHeaders]?.contains(header) == true, "\(header)")
                }
                #expect(response.headers[.accessControlAllowMethods]?.contains("POST") == true)
                #expect(response.headers[.accessControlMaxAge] != nil && response.headers[.vary] == "Origin")
            }
            preflight[.origin] = Self.other
            try await client.execute(uri: "/v1/registrations", method: .options, headers: preflight) { response in
                #expect(response.status == .forbidden)
                #expect(response.headers[.accessControlAllowOrigin] == nil && response.headers[.accessControlAllowMethods] == nil)
            }
        }
    }

    @Test func logoutForgetsTheRegistrationAndExpiresTheCookie() async throws {
        try await Self.withRouter { client in
            let (_, cookie) = try await Self.register(client)
            try await client.execute(uri: "/v1/registrations/me", method: .delete, headers: Self.headers(cookie: cookie)) { response in
                #expect(response.status == .noContent)
                let expired = response.headers[values: .setCookie].first ?? ""
                #expect(expired.hasPrefix("__Host-parley=;") && expired.contains("Max-Age=0") && expired.contains("HttpOnly"), "\(expired)")
            }
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: Self.headers(cookie: cookie)) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test func aBrowserRegistrationsFlowStartsOnlyInTheBrowserThatHoldsItsCookie() async throws {
        try await Self.withRouter { client in
            let (_, cookie) = try await Self.register(client, destination: "as", returnUrl: Self.app + "/back")
            let flowURL = try await client.execute(
                uri: "/v1/flows", method: .post, headers: Self.headers(cookie: cookie, json: true), body: RouterTests.body([:])
            ) { response in
                #expect(response.status == .created, "\(String(buffer: response.body))")
                return RouterTests.json(response.body)["url"] as? String ?? ""
            }
            let path = String(flowURL.dropFirst("https://parley.example".count))
            // Another browser (no cookie, or another registration's): a page, and nothing leaves Parley.
            let (_, otherCookie) = try await Self.register(client, destination: "as")
            for headers in [HTTPFields(), [.cookie: otherCookie]] {
                try await client.execute(uri: path, method: .get, headers: headers) { response in
                    #expect(response.status == .forbidden)
                    #expect(response.headers[.location] == nil)
                    #expect(String(buffer: response.body).contains("data-parley-error"))
                }
            }
            // The app's browser goes straight to the authorization server: no confirmation page.
            try await client.execute(uri: path, method: .get, headers: [.cookie: cookie]) { response in
                #expect(response.status == .found)
                #expect(response.headers[.location]?.hasPrefix("https://as.example/authorize?") == true)
            }
        }
    }

    @Test func theModuleIsServedToAnyOrigin() async throws {
        try await Self.withRouter { client in
            try await client.execute(uri: "/sdk/parley.js", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/javascript") == true)
                #expect(response.headers[.accessControlAllowOrigin] == "*")
                let text = String(buffer: response.body)
                #expect(text.contains("export class Parley") && text.contains("Parley-CSRF"))
            }
        }
    }

    @Test func theDestinationsFileChecksItsBrowserApps() throws {
        let text = """
            browserApps:
              - { name: shop, origins: ["https://App.example/", "http://app.example"], destinations: [sim, nowhere], returnUrls: ["https://elsewhere.example/x"] }
              - { name: "", origins: [], destinations: [] }
            destinations:
              - { name: sim, url: "https://sim.example" }
            """
        #expect(throws: DestinationSpec.Invalid.self) { try DestinationsDocument.readContents(text) }
        do {
            _ = try DestinationsDocument.readContents(text)
        } catch {
            let problems = error.problems.joined(separator: "\n")
            #expect(problems.contains("origins[0] must be an origin as a browser writes it"), "\(problems)")
            #expect(problems.contains("origins[1] must be an origin"), "plain http only to a loopback host")
            #expect(problems.contains("destinations names 'nowhere'"))
            #expect(problems.contains("returnUrls[0] must be on one of the app's origins"))
            #expect(problems.contains("browserApps[1].name must be"))
            #expect(problems.contains("origins must name at least one origin") && problems.contains("destinations must name at least one destination"))
        }
        let good = try DestinationsDocument.readContents(
            """
            browserApps: [{ name: shop, origins: ["https://app.example", "http://127.0.0.1:5173"], destinations: [sim], returnUrls: ["https://app.example/back"] }]
            destinations: [{ name: sim, url: "https://sim.example" }]
            """)
        #expect(good.browserApps.map(\.name) == ["shop"])
        #expect(good.browserApps.first?.allows(origin: "http://127.0.0.1:5173") == true)
        #expect(good.browserApps.first?.allows(origin: "http://127.0.0.1:5174") == false)
    }
}
