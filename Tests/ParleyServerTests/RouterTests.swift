import AuthFlows
import Conversation
import CurlTransport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import ParleyCrypto
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Store
import Testing

/// The router tier: the real router and handlers, in-memory repositories, a fake
/// upstream, no socket and no database.
@Suite struct RouterTests {
    static let adminToken = "admin-token-0123456789-0123456789abcdefghijk"

    static func configuration(publicURL: String = "https://parley.example") throws -> ParleyConfiguration {
        let basic = try DestinationSpec(name: "sim", url: "https://sim.example", basic: .init()).validated()
        var spec = DestinationSpec(name: "as", url: "https://api.example", allowedReturnUrls: ["app://done"])
        spec.oauth2 = .init(
            grant: "authorization_code", authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example/token",
            revocationEndpoint: nil, clientId: "parley", clientSecret: nil, clientAuthentication: nil, scopes: ["read"], scopeKeys: nil,
            challenge: nil)
        return ParleyConfiguration(
            server: .init(publicURL: publicURL), database: .init(url: ""), keys: .init(keyRing: testKeyRing(), adminTokens: [adminToken]),
            destinations: [basic, try spec.validated()])
    }

    /// Runs `body` against an application on in-memory twins.
    static func withRouter(
        dependencies: ParleyDependencies = .inMemory(), _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let app = try buildApplication(configuration: try configuration(), dependencies: dependencies, logger: quietLogger)
        try await app.test(.router) { client in try await body(client) }
    }

    static func json(_ buffer: ByteBuffer) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView))) as? [String: Any] ?? [:]
    }

    static func body(_ object: [String: Any]) throws -> ByteBuffer {
        ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: object))
    }

    /// A registration made through the API; returns (id, client token).
    static func register(_ client: any TestClientProtocol, destination: String = "sim") async throws -> (String, String) {
        try await client.execute(
            uri: "/v1/registrations", method: .post, headers: [.contentType: "application/json"],
            body: body(["destination": destination, "credentials": ["username": "u", "password": "p"]])
        ) { response in
            #expect(response.status == .created)
            let object = json(response.body)
            return (object["id"] as? String ?? "", object["clientToken"] as? String ?? "")
        }
    }

    /// Every error is problem+json with the contract's members and a request id.
    static func expectProblem(_ response: TestResponse, _ status: HTTPResponse.Status, _ code: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.status == status, sourceLocation: sourceLocation)
        #expect(response.headers[.contentType] == "application/problem+json", sourceLocation: sourceLocation)
        #expect(response.headers[.cacheControl] == "no-store", sourceLocation: sourceLocation)
        #expect(response.headers[HTTPField.Name("Parley-Request-Id")!]?.count == 16, sourceLocation: sourceLocation)
        let object = json(response.body)
        #expect(object["code"] as? String == code, sourceLocation: sourceLocation)
        #expect(object["status"] as? Int == Int(status.code), sourceLocation: sourceLocation)
        #expect(object["type"] as? String == "https://parley.dev/problems/\(code)", sourceLocation: sourceLocation)
        #expect((object["title"] as? String)?.isEmpty == false, sourceLocation: sourceLocation)
        #expect(object["detail"] is String, sourceLocation: sourceLocation)
    }

    // MARK: routes

    /// The route list is the API: a route added or removed without updating this
    /// list (and docs/api.md) fails here.
    @Test func theRouteListIsTheAPI() throws {
        let router = try buildRouter(configuration: try Self.configuration(), dependencies: .inMemory(), metrics: Metrics(), logger: quietLogger)
        let routes = Set(router.routes.map { "\($0.method.rawValue) \($0.path)" })
        var expected: Set<String> = [
            "GET /healthz", "GET /readyz", "GET /metrics", "GET /openapi.json", "GET /.well-known/jwks.json", "GET /.well-known/saml-metadata.xml",
            "GET /.well-known/oauth-protected-resource", "POST /backchannel-logout", "POST /v1/registrations", "GET /v1/registrations/me",
            "DELETE /v1/registrations/me", "PUT /v1/registrations/me/identity",
            "POST /v1/flows", "GET /v1/flows/{id}",
            "GET /flows/{id}", "GET /flows/{id}/done", "GET /pages/{file}", "GET /sdk/parley.js", "GET /callback/oauth2", "GET /callback/otp", "POST /callback/otp",
            "POST /flows/{id}/credentials", "POST /flows/{id}/confirm",
            "GET /admin/v1/registrations", "GET /admin/v1/registrations/{id}", "DELETE /admin/v1/registrations/{id}",
            "POST /admin/v1/registrations/{id}/approval", "POST /admin/v1/revocations", "GET /admin/v1/audit", "GET /admin/v1/events",
            "POST /admin/v1/events/{id}/redelivery",
        ]
        for method in ProxyController.methods {
            expected.insert("\(method.rawValue) /v1/proxy")
            expected.insert("\(method.rawValue) /v1/proxy/**")
            expected.insert("\(method.rawValue) /web/{destination}")
            expected.insert("\(method.rawValue) /web/{destination}/**")
        }
        #expect(routes == expected)
    }

    /// The OpenAPI document describes exactly the routes the router serves (MERGE, which
    /// OpenAPI cannot name, aside), and the binary serves the document in docs/.
    @Test func theOpenAPIDocumentDescribesEveryRouteAndNothingElse() async throws {
        let router = try buildRouter(configuration: try Self.configuration(), dependencies: .inMemory(), metrics: Metrics(), logger: quietLogger)
        let served = Set(
            router.routes.filter { $0.method.rawValue != "MERGE" }.map { route in
                "\(route.method.rawValue) " + route.path.description.replacingOccurrences(of: "/**", with: "/{path}")
            })
        let text = try String(contentsOfFile: packageRoot + "/docs/openapi.json", encoding: .utf8)
        #expect(text == EmbeddedOpenAPI.json, "Generated/EmbeddedOpenAPI.swift differs from docs/openapi.json: run scripts/embed-resources.sh")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect((document["openapi"] as? String)?.hasPrefix("3.1") == true)
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        let methods: Set<String> = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
        let described = Set(paths.flatMap { path, item in item.keys.filter(methods.contains).map { "\($0.uppercased()) \(path)" } })
        #expect(served.subtracting(described).sorted() == [], "routes the document lacks")
        #expect(described.subtracting(served).sorted() == [], "documented operations no route serves")
        try await Self.withRouter { client in
            try await client.execute(uri: "/openapi.json", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                #expect(String(buffer: response.body) == text)
            }
        }
    }

    @Test func unknownPathsAre404AndKnownPathsWithAnotherMethodAre405() async throws {
        try await Self.withRouter { client in
            for path in ["/", "/nope", "/v1", "/v1/nope", "/v1/registrations/me/x", "/flows", "/admin/v1/nope", "/callback/nope", "/web"] {
                for method in [HTTPRequest.Method.get, .post] {
                    let response = try await client.execute(uri: path, method: method)
                    Self.expectProblem(response, .notFound, "not_found")
                }
            }
            let id = UUID().uuidString
            let wrongMethods: [(String, HTTPRequest.Method, String)] = [
                ("/healthz", .post, "GET"), ("/readyz", .delete, "GET"), ("/metrics", .put, "GET"),
                ("/v1/registrations", .get, "POST"), ("/v1/registrations/me", .post, "DELETE, GET"),
                ("/v1/flows", .get, "POST"), ("/v1/flows/\(id)", .delete, "GET"),
                ("/flows/\(id)", .post, "GET"), ("/flows/\(id)/done", .post, "GET"), ("/callback/oauth2", .post, "GET"),
                ("/callback/otp", .delete, "GET, POST"), ("/flows/\(id)/credentials", .get, "POST"),
                ("/flows/\(id)/confirm", .get, "POST"),
                ("/web/sim/x", .trace, "DELETE, GET, HEAD, MERGE, OPTIONS, PATCH, POST, PUT"),
                ("/admin/v1/registrations/\(id)", .post, "DELETE, GET"), ("/admin/v1/revocations", .get, "POST"),
                ("/admin/v1/audit", .post, "GET"), ("/admin/v1/registrations", .delete, "GET"),
                ("/v1/proxy/a/b", .trace, "DELETE, GET, HEAD, MERGE, OPTIONS, PATCH, POST, PUT"),
                ("/v1/proxy", .init("PROPFIND")!, "DELETE, GET, HEAD, MERGE, OPTIONS, PATCH, POST, PUT"),
            ]
            for (path, method, allowed) in wrongMethods {
                let response = try await client.execute(uri: path, method: method)
                Self.expectProblem(response, .methodNotAllowed, "method_not_allowed")
                #expect(response.headers[.allow] == allowed, "\(method) \(path)")
            }
        }
    }

    // MARK: authentication

    @Test func clientRoutesRefuseMissingWrongAndAdminTokens() async throws {
        try await Self.withRouter { client in
            let routes: [(HTTPRequest.Method, String)] = [
                (.get, "/v1/registrations/me"), (.delete, "/v1/registrations/me"), (.post, "/v1/flows"),
                (.get, "/v1/flows/\(UUID().uuidString)"), (.get, "/v1/proxy/api/data"), (.post, "/v1/proxy"),
            ]
            let authorizations: [String?] = [
                nil, "", "Bearer", "Bearer ", "Basic dTpw", "Bearer pct_not-a-token", "Bearer \(Self.adminToken)",
                "Bearer " + String(repeating: "x", count: 600),
            ]
            for (method, path) in routes {
                for authorization in authorizations {
                    var headers: HTTPFields = [:]
                    if let authorization { headers[.authorization] = authorization }
                    let response = try await client.execute(uri: path, method: method, headers: headers)
                    Self.expectProblem(response, .unauthorized, "invalid_client_token")
                    #expect(response.headers[.wwwAuthenticate]?.hasPrefix("Bearer") == true)
                }
            }
        }
    }

    @Test func adminRoutesRefuseMissingWrongAndClientTokens() async throws {
        let audit = InMemoryAudit()
        var dependencies = ParleyDependencies.inMemory()
        dependencies.audit = audit
        try await Self.withRouter(dependencies: dependencies) { client in
            let (id, clientToken) = try await Self.register(client)
            let path = "/admin/v1/registrations/\(id)"
            for authorization in [nil, "Bearer", "Bearer wrong-admin-token-000", "Bearer \(clientToken)", "Basic \(Self.adminToken)"] {
                var headers: HTTPFields = [:]
                if let authorization { headers[.authorization] = authorization }
                let response = try await client.execute(uri: path, method: .get, headers: headers)
                Self.expectProblem(response, .unauthorized, "invalid_admin_token")
                #expect(response.headers[.wwwAuthenticate]?.hasPrefix("Bearer") == true)
            }
            let admin: HTTPFields = [.authorization: "Bearer \(Self.adminToken)"]
            try await client.execute(uri: path, method: .get, headers: admin) { response in
                #expect(response.status == .ok)
                let object = Self.json(response.body)
                #expect(object["id"] as? String == id)
                #expect(object["status"] as? String == "active")
                #expect(object["clientToken"] == nil)
                #expect(object["appcid"] is NSNull)
            }
            Self.expectProblem(
                try await client.execute(uri: "/admin/v1/registrations/\(UUID().uuidString)", method: .get, headers: admin), .notFound,
                "not_found")
            Self.expectProblem(try await client.execute(uri: "/admin/v1/registrations/x", method: .get, headers: admin), .notFound, "not_found")
            #expect(audit.events.contains { $0.action == "admin.registration.read" && $0.actor == .admin })
        }
    }

    @Test func adminTokensAreMatchedWhateverTheirPosition() {
        let hashes = ["first-admin-token-0000", "second-admin-token-000"].map { SecretToken.hash($0) }
        let authenticator = AdminAuthenticator(tokenHashes: hashes)
        #expect(authenticator.identify("first-admin-token-0000") == AdminIdentity(index: 0))
        #expect(authenticator.identify("second-admin-token-000") == AdminIdentity(index: 1))
        #expect(authenticator.identify("third-admin-token-0000") == nil)
        #expect(authenticator.identify(nil) == nil)
    }

    // MARK: registrations and flows through the router

    @Test func registrationLifecycle() async throws {
        let registrations = InMemoryRegistrations()
        var dependencies = ParleyDependencies.inMemory()
        dependencies.registrations = registrations
        try await Self.withRouter(dependencies: dependencies) { client in
            let (id, token) = try await Self.register(client)
            #expect(token.hasPrefix("pct_"))
            let stored = try #require(registrations.all.first)
            #expect(stored.credentialsSealed != nil && !(stored.credentialsSealed ?? []).isEmpty)
            #expect(!String(decoding: stored.credentialsSealed ?? [], as: UTF8.self).contains("\"p\""))
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            try await client.execute(uri: "/v1/registrations/me", method: .get, headers: auth) { response in
                #expect(response.status == .ok)
                let object = Self.json(response.body)
                #expect(object["id"] as? String == id)
                #expect(object["destination"] as? String == "sim")
                #expect(object["clientToken"] == nil)
                for key in ["appcid", "deviceType", "deviceModel", "userHint", "flow"] { #expect(object[key] is NSNull, "\(key)") }
                #expect((object["createdAt"] as? String)?.hasSuffix("Z") == true)
            }
            #expect(try await client.execute(uri: "/v1/registrations/me", method: .delete, headers: auth).status == .noContent)
            Self.expectProblem(try await client.execute(uri: "/v1/registrations/me", method: .get, headers: auth), .unauthorized, "invalid_client_token")
            #expect(registrations.all.isEmpty)
        }
    }

    @Test func badInputIsAProblemAndStoresNothing() async throws {
        let registrations = InMemoryRegistrations()
        var dependencies = ParleyDependencies.inMemory()
        dependencies.registrations = registrations
        try await Self.withRouter(dependencies: dependencies) { client in
            let json: HTTPFields = [.contentType: "application/json"]
            let bad: [(ByteBuffer, HTTPResponse.Status, String)] = [
                (ByteBuffer(string: "{"), .badRequest, "invalid_request"),
                (ByteBuffer(string: "[]"), .badRequest, "invalid_request"),
                (try Self.body(["destination": 7]), .badRequest, "invalid_request"),
                (try Self.body(["destination": "nowhere"]), .badRequest, "invalid_request"),
                (try Self.body(["destination": "as", "returnUrl": "app://elsewhere"]), .badRequest, "invalid_request"),
                (try Self.body(["destination": "as", "returnUrl": "app://done\u{0}"]), .badRequest, "invalid_request"),
                (try Self.body(["destination": "sim", "userHint": String(repeating: "u", count: 300)]), .badRequest, "invalid_request"),
                (try Self.body(["destination": "sim", "clientCertificate": ["pkcs12": "***"]]), .badRequest, "invalid_request"),
                (ByteBuffer(string: "{\"destination\":\"" + String(repeating: "a", count: 70_000) + "\"}"), .contentTooLarge, "payload_too_large"),
            ]
            for (body, status, code) in bad {
                Self.expectProblem(try await client.execute(uri: "/v1/registrations", method: .post, headers: json, body: body), status, code)
            }
            #expect(registrations.all.isEmpty)
        }
    }

    @Test func oauth2FlowStartsAtTheAuthorizationEndpointWithPKCE() async throws {
        let flows = InMemoryFlows()
        var dependencies = ParleyDependencies.inMemory()
        dependencies.flows = flows
        try await Self.withRouter(dependencies: dependencies) { client in
            let (_, basicToken) = try await Self.register(client, destination: "sim")
            Self.expectProblem(
                try await client.execute(
                    uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(basicToken)"], body: ByteBuffer(string: "{}")),
                .badRequest, "invalid_request")

            let (_, token) = try await Self.register(client, destination: "as")
            let auth: HTTPFields = [.authorization: "Bearer \(token)"]
            Self.expectProblem(
                try await client.execute(uri: "/v1/flows", method: .post, headers: auth, body: try Self.body(["kind": "saml2"])), .badRequest,
                "invalid_request")
            let flow = try await client.execute(uri: "/v1/flows", method: .post, headers: auth, body: ByteBuffer(string: "{}")) { response in
                #expect(response.status == .created)
                return Self.json(response.body)
            }
            #expect(flow["kind"] as? String == "oauth2")
            #expect(flow["status"] as? String == "pending")
            #expect(flow["error"] is NSNull)
            let url = try #require(flow["url"] as? String)
            #expect(url.hasPrefix("https://parley.example/flows/"))
            let start = String(url.dropFirst("https://parley.example".count))
            let id = try #require(flow["id"] as? String)

            try await FlowConfirmationRouterTests.confirm(client, start) { response in
                let location = try #require(FlowConfirmationRouterTests.onward(response))
                #expect(location.hasPrefix("https://as.example/authorize?response_type=code&client_id=parley"))
                #expect(location.contains("code_challenge_method=S256"))
                #expect(location.contains("redirect_uri=https%3A%2F%2Fparley.example%2Fcallback%2Foauth2"))
                #expect(response.headers[.contentSecurityPolicy]?.contains("frame-ancestors 'none'") == true)
            }
            // The PKCE verifier is the oauth2 kind's own state, sealed in the row.
            let row = try #require(flows.all.first { $0.idString == id })
            let verifier = try FlowKindState<OAuth2AuthorizationCodeFlow.State>(flows: flows, secrets: Secrets(keyRing: testKeyRing())).read(row)
            #expect(verifier?.pkceVerifier.count == 43)

            // A wrong secret: an HTML page, never the flow.
            try await client.execute(uri: "/flows/\(id)?k=wrong", method: .get) { response in
                #expect(response.status == .notFound)
                #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                #expect(response.headers[.cacheControl] == "no-store")
                #expect(String(buffer: response.body).contains("data-parley-error=\"not_found\""))
            }
            try await client.execute(uri: "/flows/\(id)/done", method: .get) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains("data-parley-flow-status=\"pending\""))
            }
            try await client.execute(uri: "/v1/flows/\(id)", method: .get, headers: auth) { response in
                #expect(response.status == .ok)
                #expect(Self.json(response.body)["status"] as? String == "pending")
            }
            // Another registration's flow is not found.
            Self.expectProblem(
                try await client.execute(uri: "/v1/flows/\(id)", method: .get, headers: [.authorization: "Bearer \(basicToken)"]), .notFound,
                "not_found")
            // A callback with an unknown state is refused as a page.
            try await client.execute(uri: "/callback/oauth2?state=nope&code=x", method: .get) { response in
                #expect(response.status == .badRequest)
                #expect(String(buffer: response.body).contains("data-parley-error=\"invalid_request\""))
            }
        }
    }

    /// One malformed upstream answer never stops the process: a status outside 100–599 is a 502.
    @Test func anUpstreamStatusOutsideHTTPIsA502() async throws {
        for status in [0, 99, 600, 1000, 99_999, -1] {
            let dependencies = ParleyDependencies.inMemory(transport: FakeTransport { _ in .text(status, "x") })
            try await Self.withRouter(dependencies: dependencies) { client in
                let (_, token) = try await Self.register(client)
                Self.expectProblem(
                    try await client.execute(uri: "/v1/proxy/a", method: .get, headers: [.authorization: "Bearer \(token)"]), .badGateway,
                    "upstream_unavailable")
                #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            }
        }
    }

    @Test func operationsAnswerWithoutAuthentication() async throws {
        let readiness = StaticReadiness(false)
        try await Self.withRouter(dependencies: .inMemory(readiness: readiness)) { client in
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            Self.expectProblem(try await client.execute(uri: "/readyz", method: .get), .serviceUnavailable, "store_unavailable")
            readiness.set(true)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
                let text = String(buffer: response.body)
                #expect(text.contains("# TYPE parley_http_requests_total counter"))
                #expect(text.contains("parley_http_requests_total{route=\"/healthz\",status=\"2xx\"} 1"))
                #expect(text.contains("parley_http_request_duration_seconds_bucket"))
            }
        }
    }

    // MARK: pieces the router relies on

    @Test func pagesEscapeWhatTheyShow() {
        let pages = Pages(destinations: [:], assets: PageAssets(destinations: []), publicURL: "http://127.0.0.1:8080")
        let response = pages.document(
            .message(.ok, title: "<script>alert(1)</script>", message: "a & b \"c\"", attributes: ["data-x": "\"><img>"]), language: .en)
        let text = response.html
        #expect(!text.contains("<script>"))
        #expect(!text.contains("\"><img>"))
        #expect(text.contains("&lt;script&gt;"))
        #expect(text.contains("a &amp; b"))
        #expect(response.headers[.contentSecurityPolicy]?.contains("unsafe-inline") == false)
        #expect(response.headers[.contentSecurityPolicy]?.contains("script-src") == false, "no script source is allowed")
    }

    @Test func embeddedMigrationsAreTheFilesInMigrations() throws {
        let files = try Migrator.load(directory: migrationsDirectory)
        let embedded = try Migrator.load(embedded: EmbeddedMigrations.files)
        #expect(embedded.map(\.name) == files.map(\.name), "Generated/EmbeddedMigrations.swift differs from migrations/: run scripts/embed-resources.sh")
        #expect(embedded.map(\.checksum) == files.map(\.checksum), "Generated/EmbeddedMigrations.swift differs from migrations/: run scripts/embed-resources.sh")
    }

    @Test func upstreamConnectionLimitsAreReadAndChecked() throws {
        let destinations = NSTemporaryDirectory() + "parley-destinations-\(UUID().uuidString).yaml"
        try "destinations:\n  - name: one\n    url: https://one.example\n".write(toFile: destinations, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: destinations) }
        let base = [
            "PARLEY_DATABASE_URL": "postgres://x", "PARLEY_ENCRYPTION_KEYS": "k1:" + Data(repeating: 1, count: 32).base64EncodedString(),
            "PARLEY_DESTINATIONS": destinations,
        ]
        let defaults = try ParleyConfiguration.fromEnvironment(base).transport
        #expect(defaults.maxConnectionsPerHost == 32 && defaults.maxTotalConnections == 256)
        #expect(defaults.pausedTransferDeadline == .seconds(60))

        let set = try ParleyConfiguration.fromEnvironment(
            base.merging(
                ["PARLEY_UPSTREAM_CONNECTIONS_PER_HOST": "64", "PARLEY_UPSTREAM_CONNECTIONS": "512", "PARLEY_PAUSED_TRANSFER_SECONDS": "5"]
            ) { $1 }
        ).transport
        #expect(set.maxConnectionsPerHost == 64 && set.maxTotalConnections == 512 && set.pausedTransferDeadline == .seconds(5))
        #expect(set.problems.isEmpty)

        let error = try #require(throws: ParleyConfiguration.Invalid.self) {
            try ParleyConfiguration.fromEnvironment(
                base.merging(["PARLEY_UPSTREAM_CONNECTIONS_PER_HOST": "0", "PARLEY_UPSTREAM_CONNECTIONS": "many"]) { $1 })
        }
        #expect(error.description.contains("PARLEY_UPSTREAM_CONNECTIONS_PER_HOST must be a whole number in 1...10000, got '0'"))
        #expect(error.description.contains("PARLEY_UPSTREAM_CONNECTIONS must be a whole number in 1...100000, got 'many'"))
        let inverted = try #require(throws: ParleyConfiguration.Invalid.self) {
            try ParleyConfiguration.fromEnvironment(
                base.merging(["PARLEY_UPSTREAM_CONNECTIONS_PER_HOST": "100", "PARLEY_UPSTREAM_CONNECTIONS": "50"]) { $1 })
        }
        #expect(inverted.description.contains("PARLEY_UPSTREAM_CONNECTIONS (50) must be at least PARLEY_UPSTREAM_CONNECTIONS_PER_HOST (100)"))
    }

    @Test func aBadDestinationsFileReportsEveryProblemAtOnce() throws {
        let path = NSTemporaryDirectory() + "parley-bad-destinations-\(UUID().uuidString).yaml"
        try """
        destinations:
          - name: "bad name"
            url: ftp://x
          - name: ok
            url: https://ok.example
            timeouts: { connectSeconds: -1 }
            oauth2: { grant: implicit }
          - name: ok
            url: https://twice.example
        """.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let error = try #require(throws: ParleyConfiguration.Invalid.self) {
            try ParleyConfiguration.fromEnvironment([
                "PARLEY_DATABASE_URL": "postgres://x", "PARLEY_ENCRYPTION_KEYS": "k1:" + Data(repeating: 1, count: 32).base64EncodedString(),
                "PARLEY_DESTINATIONS": path,
            ])
        }
        let text = error.description
        for expected in [
            "'bad name': name", "'bad name': url", "'ok': timeouts.connectSeconds", "'ok': oauth2.grant", "'ok': oauth2.tokenEndpoint",
            "'ok' is defined twice",
        ] {
            #expect(text.contains(expected), "\(expected)")
        }
    }
}
