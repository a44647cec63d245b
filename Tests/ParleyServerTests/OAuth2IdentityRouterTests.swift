import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyEncoding
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

/// Who signed in through an OAuth2 authorization-code flow, through the real router on in-memory
/// storage with a fake authorization server: the `id_token` (checked against the destination's
/// `jwksUri`, `issuer`, `clientId` and the flow's nonce), else userinfo; the first sign-in binds
/// the registration, a later one as somebody else fails with `identity_mismatch`, and a sign-in
/// without a valid identity fails with `invalid_id_token`; none of these stores a token.
@Suite struct OAuth2IdentityRouterTests {
    static let publicURL = "https://parley.example"
    static let issuer = "https://as.example"

    static func destination(_ name: String, issuer: String? = nil, jwksUri: String? = nil, userinfo: String? = nil) -> DestinationSpec {
        var spec = DestinationSpec(name: name, url: "https://\(name).api.example")
        spec.oauth2 = .init(
            grant: "authorization_code", authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example/token",
            revocationEndpoint: "https://as.example/revoke", clientId: "parley", clientSecret: nil, clientAuthentication: nil,
            scopes: ["read"], scopeKeys: nil, challenge: nil, issuer: issuer, jwksUri: jwksUri, userinfoEndpoint: userinfo)
        return spec
    }

    static func configuration() throws -> ParleyConfiguration {
        ParleyConfiguration(
            server: .init(publicURL: publicURL), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [
                try destination("oidc", issuer: issuer, jwksUri: "https://as.example/jwks").validated(),
                try destination("userinfo", userinfo: "https://as.example/userinfo").validated(),
                try destination("plain").validated(),
            ])
    }

    /// The authorization server: a token endpoint that answers with the `id_token` the test put
    /// up next, its keys, userinfo naming whom the test says, and a revocation endpoint.
    final class FakeAuthorizationServer: Sendable {
        struct State {
            var idToken: String?
            var userinfo: UpstreamResponse = .text(200, #"{"sub":"alice"}"#)
            var issued = 0
            var userinfoAuthorizations: [String] = []
            var revoked: [String] = []
            var jwksFetches = 0
        }

        let signer: IdentityIssuer
        let state = Mutex(State())

        init(signer: IdentityIssuer) { self.signer = signer }

        func answer(_ request: UpstreamRequest) -> UpstreamResponse {
            switch (request.method, request.url) {
            case ("POST", "https://as.example/token"):
                let body = state.withLock { state -> String in
                    state.issued += 1
                    var answer: [String: Any] = [
                        "access_token": "at-\(state.issued)", "refresh_token": "rt-\(state.issued)", "token_type": "Bearer", "expires_in": 3600,
                    ]
                    answer["id_token"] = state.idToken
                    return String(decoding: (try? JSONSerialization.data(withJSONObject: answer)) ?? Data(), as: UTF8.self)
                }
                return .text(200, body, headers: ["Content-Type": "application/json"])
            case ("GET", "https://as.example/jwks"):
                state.withLock { $0.jwksFetches += 1 }
                return .text(200, String(decoding: signer.jwks, as: UTF8.self))
            case ("GET", "https://as.example/userinfo"):
                return state.withLock { state in
                    state.userinfoAuthorizations.append(request.headers["Authorization"] ?? "")
                    return state.userinfo
                }
            case ("POST", "https://as.example/revoke"):
                let bytes: [UInt8] = if case .bytes(let bytes) = request.body { bytes } else { [] }
                let form = PercentEncoding.decodeForm(String(decoding: bytes, as: UTF8.self)) ?? []
                state.withLock { $0.revoked.append(form.first { $0.0 == "token" }?.1 ?? "") }
                return .text(200)
            default:
                return .text(404)
            }
        }

        var issued: Int { state.withLock { $0.issued } }
        var revoked: [String] { state.withLock { $0.revoked } }
        func next(idToken: String?) { state.withLock { $0.idToken = idToken } }
        func next(userinfo: UpstreamResponse) { state.withLock { $0.userinfo = userinfo } }
    }

    struct World {
        let signer: IdentityIssuer
        let server: FakeAuthorizationServer
        let clock = TestClock()
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        let tokens = InMemoryTokens()
        let audit = InMemoryAudit()
        let logs = LogCapture()

        init() throws {
            signer = try IdentityIssuer()
            server = FakeAuthorizationServer(signer: signer)
        }

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { [server] in server.answer($0) }, clock: clock)
            dependencies.registrations = registrations
            dependencies.flows = flows
            dependencies.tokens = tokens
            dependencies.audit = audit
            let app = try buildApplication(
                configuration: try OAuth2IdentityRouterTests.configuration(), dependencies: dependencies, logger: logs.logger())
            try await app.test(.router) { client in try await body(client) }
        }

        /// Claims of an `id_token` of the authorization server for `sub`, with `changes` over them
        /// (`NSNull()` removes one).
        func claims(sub: String, nonce: String?, _ changes: [String: Any] = [:]) -> [String: Any] {
            let now = Int(clock.now.timeIntervalSince1970)
            var claims: [String: Any] = ["iss": OAuth2IdentityRouterTests.issuer, "sub": sub, "aud": "parley", "iat": now, "exp": now + 300]
            claims["nonce"] = nonce
            for (name, value) in changes { claims[name] = value is NSNull ? nil : value }
            return claims
        }

        func flow(_ id: String) -> FlowRecord? { flows.all.first { $0.idString == id } }

        func storedTokens(_ registration: String) async throws -> [String] {
            guard let id = UUID(uuidString: registration) else { return [] }
            return try await tokens.tokens(registrationID: id).map(\.1.accessToken)
        }
    }

    /// A registration of `destination`: (id, client token).
    static func register(_ client: any TestClientProtocol, _ destination: String) async throws -> (String, String) {
        try await client.execute(uri: "/v1/registrations", method: .post, body: try RouterTests.body(["destination": destination])) { response in
            #expect(response.status == .created)
            let object = RouterTests.json(response.body)
            return (object["id"] as? String ?? "", object["clientToken"] as? String ?? "")
        }
    }

    /// A started flow: its id and the authorization request's parameters (`state`, `nonce`, …),
    /// through the confirmation page where the start page shows one.
    static func startFlow(_ client: any TestClientProtocol, token: String) async throws -> (id: String, parameters: [String: String]) {
        let (id, url) = try await client.execute(
            uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)"], body: try RouterTests.body(["kind": "oauth2"])
        ) { response in
            #expect(response.status == .created)
            let flow = RouterTests.json(response.body)
            return (flow["id"] as? String ?? "", flow["url"] as? String ?? "")
        }
        let start = try await client.execute(uri: String(url.dropFirst(publicURL.count)), method: .get) { $0 }
        var location = start.headers[.location]
        if start.status == .ok, String(buffer: start.body).contains("data-parley-confirm") {
            // A confirmation page: press its button as a browser would.
            let page = String(buffer: start.body)
            func field(_ name: String) -> String {
                guard let found = page.range(of: "name=\"\(name)\" value=\"") else { return "" }
                return String(page[found.upperBound...].prefix { $0 != "\"" })
            }
            let cookie = start.headers[values: .setCookie].first { $0.hasPrefix("parley_confirm=") }?.split(separator: ";").first.map(String.init)
            let confirmed = try await client.execute(
                uri: "/flows/\(id)/confirm", method: .post,
                headers: [.contentType: "application/x-www-form-urlencoded", .cookie: cookie ?? ""],
                body: ByteBuffer(string: "k=\(field("k"))&token=\(field("token"))")
            ) { $0 }
            location = confirmed.headers[.location]
            if let refresh = confirmed.headers[HTTPField.Name("Refresh")!], refresh.hasPrefix("0; url=") {
                location = String(refresh.dropFirst("0; url=".count))
            }
        }
        let authorize = try #require(location, "the start page leads to the authorization endpoint")
        #expect(authorize.hasPrefix("https://as.example/authorize?"))
        let query = String(authorize.drop { $0 != "?" }.dropFirst())
        let pairs = PercentEncoding.decodeForm(query) ?? []
        return (id, Dictionary(pairs, uniquingKeysWith: { first, _ in first }))
    }

    /// The authorization server's redirect back to Parley: the browser's `GET /callback/oauth2`.
    @discardableResult
    static func callback(_ client: any TestClientProtocol, state: String?) async throws -> TestResponse {
        try await client.execute(uri: "/callback/oauth2?state=\(state ?? "")&code=c0de", method: .get) { response in
            #expect(response.status == .seeOther)
            return response
        }
    }

    // MARK: id_token

    @Test func theIDTokenOfTheRegistrationsUserCompletesBindsAndStoresTheToken() async throws {
        let world = try World()
        try await world.run { client in
            let (registration, token) = try await Self.register(client, "oidc")
            let first = try await Self.startFlow(client, token: token)
            // OpenID Connect is asked for, with a fresh nonce the flow keeps.
            #expect(first.parameters["scope"]?.split(separator: " ").map(String.init) == ["openid", "read"])
            let nonce = try #require(first.parameters["nonce"])
            #expect(nonce.count >= 43)
            let row = try #require(world.flow(first.id))
            let kept = try FlowKindState<OAuth2AuthorizationCodeFlow.State>(flows: world.flows, secrets: Secrets(keyRing: testKeyRing())).read(row)
            #expect(kept?.nonce == nonce)

            world.server.next(idToken: try world.signer.token(world.claims(sub: "alice", nonce: nonce)))
            let answer = try await Self.callback(client, state: first.parameters["state"])
            #expect(answer.headers[.location] == "\(Self.publicURL)/flows/\(first.id)/done")
            #expect(world.flow(first.id)?.status == .completed)
            #expect(world.flow(first.id)?.error == nil)
            // The first sign-in binds the registration; the token is stored.
            let registrationID = try #require(UUID(uuidString: registration))
            let user = try #require(try await world.registrations.find(id: registrationID)?.user)
            #expect(user == RegistrationUser(issuer: Self.issuer, subject: "alice", verified: false, match: "alice"))
            #expect(try await world.storedTokens(registration) == ["at-1"])
            #expect(world.audit.events.contains { $0.action == "registration.user_bound" })

            // alice again (in other letters) on the same registration: completes, the token is renewed.
            let second = try await Self.startFlow(client, token: token)
            #expect(second.parameters["nonce"] != nonce, "a nonce per opening")
            world.server.next(idToken: try world.signer.token(world.claims(sub: "ALICE", nonce: second.parameters["nonce"])))
            try await Self.callback(client, state: second.parameters["state"])
            #expect(world.flow(second.id)?.status == .completed)
            #expect(try await world.storedTokens(registration) == ["at-2"])
            #expect(world.server.revoked.isEmpty)

            // Neither the id_token nor a token is ever logged.
            let logged = world.logs.all.joined(separator: "\n")
            for secret in ["at-1", "rt-1", "at-2", nonce] { #expect(!logged.contains(secret)) }
            #expect(!logged.contains("eyJ"), "no JWT in the log")
        }
    }

    @Test func aLaterSignInAsSomebodyElseFailsAndLeavesTheTokenAsItWas() async throws {
        let world = try World()
        try await world.run { client in
            let (registration, token) = try await Self.register(client, "oidc")
            let first = try await Self.startFlow(client, token: token)
            world.server.next(idToken: try world.signer.token(world.claims(sub: "alice", nonce: first.parameters["nonce"])))
            try await Self.callback(client, state: first.parameters["state"])
            #expect(try await world.storedTokens(registration) == ["at-1"])

            // Bob signs in on alice's registration (the phishing case): the flow fails, bob's
            // tokens are revoked at the authorization server, alice's stored token stays.
            let second = try await Self.startFlow(client, token: token)
            world.server.next(idToken: try world.signer.token(world.claims(sub: "bob", nonce: second.parameters["nonce"])))
            let answer = try await Self.callback(client, state: second.parameters["state"])
            #expect(answer.headers[.location] == "\(Self.publicURL)/flows/\(second.id)/done")
            #expect(world.flow(second.id)?.status == .failed)
            #expect(world.flow(second.id)?.error == "identity_mismatch")
            #expect(try await world.storedTokens(registration) == ["at-1"])
            #expect(world.server.revoked == ["rt-2", "at-2"])
            #expect(world.registrations.all.first?.user?.subject == "alice")
            let mismatch = try #require(world.audit.events.first { $0.action == "flow.identity_mismatch" })
            #expect(mismatch.detail["expectedIssuer"] == Self.issuer)
            #expect(mismatch.detail.values.allSatisfy { !$0.contains("bob") }, "issuers only")
            try await client.execute(uri: "/v1/flows/\(second.id)", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                let flow = RouterTests.json(response.body)
                #expect(flow["status"] as? String == "failed")
                #expect(flow["error"] as? String == "identity_mismatch")
            }
            try await client.execute(uri: "/flows/\(second.id)/done", method: .get) { response in
                #expect(response.status == .forbidden)
                #expect(String(buffer: response.body).contains("data-parley-flow-status=\"failed\""))
            }
        }
    }

    /// Every way an `id_token` can be wrong ends the flow `invalid_id_token`: nothing stored,
    /// nobody bound, the tokens revoked.
    @Test func aBadOrMissingIDTokenFailsTheFlowAndStoresNothing() async throws {
        let world = try World()
        let impostor = try IdentityIssuer()
        typealias Forge = @Sendable (World, String?) throws -> String?
        let cases: [(String, Forge)] = [
            ("missing", { _, _ in nil }),
            ("bad signature", { world, nonce in try impostor.token(world.claims(sub: "alice", nonce: nonce)) }),
            ("wrong aud", { world, nonce in try world.signer.token(world.claims(sub: "alice", nonce: nonce, ["aud": "someone-else"])) }),
            ("wrong iss", { world, nonce in try world.signer.token(world.claims(sub: "alice", nonce: nonce, ["iss": "https://evil.example"])) }),
            ("wrong nonce", { world, _ in try world.signer.token(world.claims(sub: "alice", nonce: "not-this-flows")) }),
            ("no nonce", { world, _ in try world.signer.token(world.claims(sub: "alice", nonce: nil)) }),
            ("expired", { world, nonce in
                let past = Int(world.clock.now.timeIntervalSince1970) - 3600
                return try world.signer.token(world.claims(sub: "alice", nonce: nonce, ["iat": past, "exp": past + 300]))
            }),
            ("alg none", { world, nonce in
                IdentityIssuer.encode(["alg": "none"]) + "." + IdentityIssuer.encode(world.claims(sub: "alice", nonce: nonce)) + "."
            }),
            ("not a JWT", { _, _ in "garbage" }),
        ]
        try await world.run { client in
            var revoked = 0
            for (name, forge) in cases {
                let (registration, token) = try await Self.register(client, "oidc")
                let flow = try await Self.startFlow(client, token: token)
                world.server.next(idToken: try forge(world, flow.parameters["nonce"]))
                try await Self.callback(client, state: flow.parameters["state"])
                #expect(world.flow(flow.id)?.status == .failed, "\(name)")
                #expect(world.flow(flow.id)?.error == "invalid_id_token", "\(name)")
                #expect(try await world.storedTokens(registration).isEmpty, "\(name)")
                let registrationID = try #require(UUID(uuidString: registration))
                #expect(try await world.registrations.find(id: registrationID)?.user == nil, "\(name)")
                revoked += 2
                #expect(world.server.revoked.count == revoked, "\(name): the unused tokens are revoked")
            }
            #expect(world.audit.events.allSatisfy { $0.action != "registration.user_bound" })
            let logged = world.logs.all.joined(separator: "\n")
            #expect(logged.contains("the id_token failed a check"))
            #expect(!logged.contains("eyJ"), "no JWT in the log")
        }
    }

    // MARK: userinfo

    @Test func withoutKeysUserinfoNamesWhoSignedIn() async throws {
        let world = try World()
        try await world.run { client in
            let (registration, token) = try await Self.register(client, "userinfo")
            let first = try await Self.startFlow(client, token: token)
            #expect(first.parameters["scope"] == "openid read")
            #expect(first.parameters["nonce"] != nil)
            // An id_token is not read where the destination names no keys.
            world.server.next(idToken: try world.signer.token(world.claims(sub: "mallory", nonce: first.parameters["nonce"])))
            world.server.next(userinfo: .text(200, #"{"sub":"alice","name":"Alice"}"#))
            try await Self.callback(client, state: first.parameters["state"])
            #expect(world.flow(first.id)?.status == .completed)
            #expect(world.server.state.withLock { $0.userinfoAuthorizations } == ["Bearer at-1"], "asked with the new access token")
            // No `issuer`: the token endpoint's origin vouches.
            #expect(world.registrations.all.first?.user == RegistrationUser(issuer: "https://as.example", subject: "alice", verified: false, match: "alice"))
            #expect(try await world.storedTokens(registration) == ["at-1"])

            // Bob, by userinfo: identity_mismatch, nothing stored.
            let second = try await Self.startFlow(client, token: token)
            world.server.next(userinfo: .text(200, #"{"sub":"bob"}"#))
            try await Self.callback(client, state: second.parameters["state"])
            #expect(world.flow(second.id)?.error == "identity_mismatch")
            #expect(try await world.storedTokens(registration) == ["at-1"])

            // An answer that names nobody, or none at all.
            for (answer, error) in [
                (UpstreamResponse.text(200, #"{"name":"no sub"}"#), "invalid_userinfo"), (.text(200, #"{"sub":42}"#), "invalid_userinfo"),
                (.text(200, #"["alice"]"#), "invalid_userinfo"), (.text(200, #"{"sub":""}"#), "invalid_userinfo"),
                (.text(200, "<html>"), "invalid_userinfo"), (.text(401), "invalid_userinfo"),
                (.text(200, #"{"sub":"\#(String(repeating: "a", count: Userinfo.maxSubjectBytes + 1))"}"#), "invalid_userinfo"),
                (.text(200, String(repeating: " ", count: Userinfo.maxBodyBytes) + #"{"sub":"alice"}"#), "invalid_userinfo"),
                (.text(503), "temporarily_unavailable"),
            ] {
                let (other, otherToken) = try await Self.register(client, "userinfo")
                let flow = try await Self.startFlow(client, token: otherToken)
                world.server.next(userinfo: answer)
                try await Self.callback(client, state: flow.parameters["state"])
                #expect(world.flow(flow.id)?.error == error, "\(answer.status)")
                #expect(try await world.storedTokens(other).isEmpty)
            }
        }
    }

    @Test func aDestinationThatReadsNoIdentityCompletesAsBefore() async throws {
        let world = try World()
        try await world.run { client in
            let (registration, token) = try await Self.register(client, "plain")
            let flow = try await Self.startFlow(client, token: token)
            #expect(flow.parameters["scope"] == "read")
            #expect(flow.parameters["nonce"] == nil)
            world.server.next(idToken: try world.signer.token(world.claims(sub: "alice", nonce: nil)))
            try await Self.callback(client, state: flow.parameters["state"])
            #expect(world.flow(flow.id)?.status == .completed)
            #expect(try await world.storedTokens(registration) == ["at-1"])
            #expect(world.registrations.all.first?.user == nil)
            #expect(world.server.state.withLock { $0.jwksFetches } == 0)
        }
    }

    // MARK: iss (RFC 9207)

    /// The mix-up defence: an authorization response naming another issuer than the
    /// destination's `oauth2.issuer` ends the flow `issuer_mismatch` and its code never reaches
    /// the token endpoint; the right issuer, or none, completes; at a destination that names no
    /// issuer, `iss` is not compared.
    @Test func anAuthorizationResponseFromAnotherIssuerIsRefusedBeforeTheCodeIsExchanged() async throws {
        let world = try World()
        try await world.run { client in
            let (_, token) = try await Self.register(client, "oidc")
            func signIn(iss: String?) async throws -> (id: String, status: FlowStatus?, error: String?) {
                let flow = try await Self.startFlow(client, token: token)
                world.server.next(idToken: try world.signer.token(world.claims(sub: "alice", nonce: flow.parameters["nonce"])))
                let iss = iss.map { "&iss=" + PercentEncoding.encodeFormComponent($0) } ?? ""
                try await client.execute(uri: "/callback/oauth2?state=\(flow.parameters["state"] ?? "")&code=c0de\(iss)", method: .get) { response in
                    #expect(response.status == .seeOther)
                    #expect(response.headers[.location] == "\(Self.publicURL)/flows/\(flow.id)/done")
                }
                return (flow.id, world.flow(flow.id)?.status, world.flow(flow.id)?.error)
            }
            let right = try await signIn(iss: Self.issuer)
            #expect(right.status == .completed && right.error == nil)
            #expect(world.server.issued == 1)

            let wrong = try await signIn(iss: "https://attacker.example")
            #expect(wrong.status == .failed)
            #expect(wrong.error == "issuer_mismatch")
            #expect(world.server.issued == 1, "the code of another server's answer is never exchanged")
            #expect(world.logs.all.contains { $0.contains("names another issuer") })

            // An error answer naming another issuer fails the same way (not with its own error).
            let flow = try await Self.startFlow(client, token: token)
            try await client.execute(uri: "/callback/oauth2?state=\(flow.parameters["state"] ?? "")&error=access_denied&iss=https%3A%2F%2Fattacker.example", method: .get) { _ in }
            #expect(world.flow(flow.id)?.error == "issuer_mismatch")

            let absent = try await signIn(iss: nil)
            #expect(absent.status == .completed && absent.error == nil)
            #expect(world.server.issued == 2)
        }
    }

    @Test func aDestinationThatNamesNoIssuerDoesNotCompareIss() async throws {
        let world = try World()
        try await world.run { client in
            let (_, token) = try await Self.register(client, "plain")
            let flow = try await Self.startFlow(client, token: token)
            try await client.execute(uri: "/callback/oauth2?state=\(flow.parameters["state"] ?? "")&code=c0de&iss=https%3A%2F%2Fanyone.example", method: .get) { _ in }
            #expect(world.flow(flow.id)?.status == .completed)
            #expect(world.server.issued == 1)
        }
    }
}
