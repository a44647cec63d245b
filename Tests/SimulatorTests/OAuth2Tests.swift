import Foundation
import ParleyCrypto
import ParleyTesting
import Testing
import UpstreamSimulator

@Suite("OAuth2 authorization server of the upstream simulator")
struct OAuth2Tests {
    static let confidentialBasic = basicAuthorization("parley-confidential", "s3cret")

    @Test("authorization code with PKCE: a good verifier gets tokens, the code works once")
    func authorizationCode() async throws {
        try await withSimulator { port, state in
            let redirectURI = "http://127.0.0.1:\(port)/echo/cb"
            let pkce = pkcePair()
            let page = try await RawHTTP.request(
                port: port, method: "GET",
                target: "/oauth/authorize?response_type=code&client_id=parley-public&redirect_uri=\(urlEncode(redirectURI))"
                    + "&state=xyz&code_challenge=\(pkce.challenge)&code_challenge_method=S256&scope=read%20write")
            #expect(page.status == 200)
            #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
            for needle in [#"id="username""#, #"id="password""#, #"id="login""#, #"action="/oauth/authorize""#, pkce.challenge] {
                #expect(page.text.contains(needle))
            }

            let login = try await authorize(port, redirectURI: redirectURI, state: "xyz", challenge: pkce.challenge, scope: "read write")
            #expect(login.status == 302)
            let location = try #require(login.header("Location"))
            #expect(location.hasPrefix(redirectURI + "?code="))
            let query = queryItems(location)
            #expect(query["state"] == "xyz")
            // RFC 9207: the authorization response names the issuer, as Keycloak's does.
            #expect(query["iss"] == "http://127.0.0.1:\(port)")
            let code = try #require(query["code"])

            let redeem: [(String, String)] = [
                ("grant_type", "authorization_code"), ("client_id", "parley-public"), ("code", code),
                ("redirect_uri", redirectURI), ("code_verifier", pkce.verifier),
            ]
            let tokens = try await postForm(port, "/oauth/token", redeem)
            #expect(tokens.status == 200)
            #expect(tokens.header("Cache-Control") == "no-store")
            #expect(string(tokens, "token_type") == "Bearer")
            #expect(tokens.json?["expires_in"] as? Int == 3600)
            #expect(string(tokens, "scope") == "read write")
            let access = try #require(string(tokens, "access_token"))
            #expect(string(tokens, "refresh_token") != nil)

            let resource = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth-api/bar/items?x=1", headers: [("Authorization", "Bearer \(access)")])
            #expect(resource.status == 200)
            #expect(string(resource, "message") == "hello oauth")
            #expect(string(resource, "sub") == "alice")
            #expect(string(resource, "path") == "/oauth-api/bar/items")

            let reused = try await postForm(port, "/oauth/token", redeem)
            #expect(reused.status == 400)
            #expect(string(reused, "error") == "invalid_grant")
            // RFC 6749 §4.1.2: a replayed code revokes what it produced.
            #expect(state.oauth.validate(accessToken: access) == nil)

            #expect(state.oauth.tokenCalls(grant: "authorization_code") == 2)
            #expect(state.oauth.authorizePages == 1)
            #expect(state.oauth.authorizeLogins == 1)
        }
    }

    @Test("authorization code: wrong, missing verifier or other redirect_uri are invalid_grant")
    func authorizationCodeRefusals() async throws {
        try await withSimulator { port, _ in
            let redirectURI = "https://app.example/cb"
            func redeem(_ code: String, verifier: String?, redirect: String = redirectURI) async throws -> RawHTTPResponse {
                var pairs = [("grant_type", "authorization_code"), ("client_id", "parley-public"), ("code", code), ("redirect_uri", redirect)]
                if let verifier { pairs.append(("code_verifier", verifier)) }
                return try await postForm(port, "/oauth/token", pairs)
            }
            let bad = try await obtainCode(port, redirectURI: redirectURI)
            let wrongVerifier = try await redeem(bad.code, verifier: pkcePair().verifier)
            #expect(wrongVerifier.status == 400)
            #expect(string(wrongVerifier, "error") == "invalid_grant")
            let consumed = try await redeem(bad.code, verifier: bad.verifier)
            #expect(string(consumed, "error") == "invalid_grant", "a failed redemption still uses the code up")

            let missing = try await obtainCode(port, redirectURI: redirectURI)
            #expect(string(try await redeem(missing.code, verifier: nil), "error") == "invalid_grant")

            let elsewhere = try await obtainCode(port, redirectURI: redirectURI)
            #expect(string(try await redeem(elsewhere.code, verifier: elsewhere.verifier, redirect: "https://evil.example/cb"), "error") == "invalid_grant")

            let unknown = try await redeem("code_nonsense", verifier: pkcePair().verifier)
            #expect(string(unknown, "error") == "invalid_grant")
        }
    }

    @Test("authorize refuses unknown clients and unregistered redirect URIs with a page, not a redirect")
    func authorizeRefusals() async throws {
        let clients = OAuthClient.defaults + [OAuthClient(id: "fixed", secret: "x", redirectURIs: ["https://app.example/cb"])]
        try await withSimulator(SimulatorConfiguration(oauthClients: clients)) { port, state in
            let unknownClient = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?response_type=code&client_id=nobody&redirect_uri=https%3A%2F%2Fapp.example%2Fcb")
            #expect(unknownClient.status == 400)
            #expect(unknownClient.header("Location") == nil)

            let unregistered = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?response_type=code&client_id=fixed&redirect_uri=https%3A%2F%2Fevil.example%2Fcb")
            #expect(unregistered.status == 400)
            #expect(unregistered.header("Location") == nil)
            let notHTTP = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?response_type=code&client_id=parley-public&redirect_uri=javascript%3Aalert(1)")
            #expect(notHTTP.status == 400)

            // Registered URI but no PKCE from a public client: the error goes back to the client.
            let noPKCE = try await RawHTTP.request(
                port: port, method: "GET",
                target: "/oauth/authorize?response_type=code&client_id=parley-public&redirect_uri=https%3A%2F%2Fapp.example%2Fcb&state=s")
            #expect(noPKCE.status == 302)
            let location = try #require(noPKCE.header("Location"))
            #expect(queryItems(location)["error"] == "invalid_request")
            #expect(queryItems(location)["state"] == "s")
            #expect(queryItems(location)["iss"] == "http://127.0.0.1:\(port)", "error answers name the issuer too")

            // The only registered URI is used when none is given; a confidential client may skip PKCE.
            let implicitRedirect = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?response_type=code&client_id=fixed")
            #expect(implicitRedirect.status == 200)

            let wrongPassword = try await authorize(
                port, redirectURI: "https://app.example/cb", challenge: pkcePair().challenge, password: "guess")
            #expect(wrongPassword.status == 200)
            #expect(wrongPassword.header("Location") == nil)
            #expect(wrongPassword.text.contains(#"id="error""#))
            #expect(wrongPassword.text.contains(#"id="username""#))
            #expect(state.oauth.authorizeFailures == 1)
        }
    }

    @Test("client credentials with client_secret_basic and client_secret_post; no refresh token")
    func clientCredentials() async throws {
        try await withSimulator { port, state in
            let viaBasic = try await postForm(port, "/oauth/token", [("grant_type", "client_credentials"), ("scope", "api")], headers: [Self.confidentialBasic])
            #expect(viaBasic.status == 200)
            #expect(viaBasic.json?["refresh_token"] == nil)
            #expect(string(viaBasic, "scope") == "api")
            let access = try #require(string(viaBasic, "access_token"))
            #expect(state.oauth.validate(accessToken: access)?.subject == "parley-confidential")

            let viaPost = try await postForm(
                port, "/oauth/token", [("grant_type", "client_credentials"), ("client_id", "parley-confidential"), ("client_secret", "s3cret")])
            #expect(viaPost.status == 200)
            #expect(string(viaPost, "access_token") != nil)

            let wrongSecret = try await postForm(
                port, "/oauth/token", [("grant_type", "client_credentials")], headers: [basicAuthorization("parley-confidential", "nope")])
            #expect(wrongSecret.status == 401)
            #expect(string(wrongSecret, "error") == "invalid_client")
            #expect(wrongSecret.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
            let wrongPostSecret = try await postForm(
                port, "/oauth/token", [("grant_type", "client_credentials"), ("client_id", "parley-confidential"), ("client_secret", "nope")])
            #expect(wrongPostSecret.status == 401)
            let noSecret = try await postForm(port, "/oauth/token", [("grant_type", "client_credentials"), ("client_id", "parley-confidential")])
            #expect(string(noSecret, "error") == "invalid_client")
            let publicClient = try await postForm(port, "/oauth/token", [("grant_type", "client_credentials"), ("client_id", "parley-public")])
            #expect(publicClient.status == 400)
            #expect(string(publicClient, "error") == "unauthorized_client")

            let unsupported = try await postForm(port, "/oauth/token", [("grant_type", "implicit")], headers: [Self.confidentialBasic])
            #expect(string(unsupported, "error") == "unsupported_grant_type")
            let missingGrant = try await postForm(port, "/oauth/token", [], headers: [Self.confidentialBasic])
            #expect(string(missingGrant, "error") == "invalid_request")
            let json = try await RawHTTP.request(
                port: port, method: "POST", target: "/oauth/token", headers: [Self.confidentialBasic, ("Content-Type", "application/json")],
                body: Array(#"{"grant_type":"client_credentials"}"#.utf8))
            #expect(string(json, "error") == "invalid_request")

            #expect(state.oauth.tokenCalls(grant: "client_credentials") == 6)
            #expect(state.oauth.tokenCalls(grant: "none") == 2)
            #expect(state.oauth.tokenCalls(grant: "implicit") == 1)
        }
    }

    @Test("password grant, then refresh rotation: the old refresh token is refused")
    func passwordAndRefreshRotation() async throws {
        try await withSimulator { port, state in
            let wrong = try await postForm(
                port, "/oauth/token", [("grant_type", "password"), ("username", "alice"), ("password", "x")], headers: [Self.confidentialBasic])
            #expect(wrong.status == 400)
            #expect(string(wrong, "error") == "invalid_grant")

            let first = try await postForm(
                port, "/oauth/token",
                [("grant_type", "password"), ("username", "alice"), ("password", "wonderland"), ("scope", "read write")],
                headers: [Self.confidentialBasic])
            #expect(first.status == 200)
            let refresh1 = try #require(string(first, "refresh_token"))

            let second = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)], headers: [Self.confidentialBasic])
            #expect(second.status == 200)
            let refresh2 = try #require(string(second, "refresh_token"))
            let access2 = try #require(string(second, "access_token"))
            #expect(refresh2 != refresh1)
            #expect(string(second, "scope") == "read write")
            #expect(state.oauth.validate(accessToken: access2)?.subject == "alice")

            let replay = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)], headers: [Self.confidentialBasic])
            #expect(replay.status == 400)
            #expect(string(replay, "error") == "invalid_grant")

            let otherClient = try await postForm(
                port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2), ("client_id", "parley-public")])
            #expect(string(otherClient, "error") == "invalid_grant", "a refresh token belongs to its client")

            let narrowed = try await postForm(
                port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2), ("scope", "read")],
                headers: [Self.confidentialBasic])
            #expect(narrowed.status == 200)
            #expect(string(narrowed, "scope") == "read")

            #expect(state.oauth.tokenCalls(grant: "password") == 2)
            #expect(state.oauth.tokenCalls(grant: "refresh_token") == 4)
            #expect(state.oauth.tokenErrorsByCode["invalid_grant"] == 3)
        }
    }

    @Test("RFC 7009 revocation of access and refresh tokens, counted by hint")
    func revocation() async throws {
        try await withSimulator { port, state in
            let issued = try await postForm(
                port, "/oauth/token", [("grant_type", "password"), ("username", "alice"), ("password", "wonderland")],
                headers: [Self.confidentialBasic])
            let access = try #require(string(issued, "access_token"))
            let refresh = try #require(string(issued, "refresh_token"))

            let unauthenticated = try await postForm(port, "/oauth/revoke", [("token", access)])
            #expect(unauthenticated.status == 401)
            let revokedAccess = try await postForm(
                port, "/oauth/revoke", [("token", access), ("token_type_hint", "access_token")], headers: [Self.confidentialBasic])
            #expect(revokedAccess.status == 200)
            let rejected = try await RawHTTP.request(port: port, method: "GET", target: "/oauth-api/x", headers: [("Authorization", "Bearer \(access)")])
            #expect(rejected.status == 401)

            let refreshed = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)], headers: [Self.confidentialBasic])
            #expect(refreshed.status == 200, "revoking an access token leaves the refresh token alone")
            let refresh2 = try #require(string(refreshed, "refresh_token"))
            let access2 = try #require(string(refreshed, "access_token"))

            let revokedRefresh = try await postForm(
                port, "/oauth/revoke", [("token", refresh2), ("token_type_hint", "refresh_token")], headers: [Self.confidentialBasic])
            #expect(revokedRefresh.status == 200)
            let dead = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2)], headers: [Self.confidentialBasic])
            #expect(string(dead, "error") == "invalid_grant")
            #expect(state.oauth.validate(accessToken: access2) == nil, "a revoked refresh token takes its grant's access tokens along")

            let unknown = try await postForm(port, "/oauth/revoke", [("token", "whatever")], headers: [Self.confidentialBasic])
            #expect(unknown.status == 200)
            #expect(state.oauth.revocationsByHint == ["access_token": 1, "refresh_token": 1, "none": 1])
        }
    }

    @Test("fail-token makes the next N token calls fail with Retry-After; token-delay slows them")
    func tokenControls() async throws {
        try await withSimulator { port, state in
            let armed = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/fail-token?status=503&count=2&retryAfter=7")
            #expect(armed.status == 204)
            let call: [(String, String)] = [("grant_type", "client_credentials")]
            for _ in 0..<2 {
                let failed = try await postForm(port, "/oauth/token", call, headers: [Self.confidentialBasic])
                #expect(failed.status == 503)
                #expect(failed.header("Retry-After") == "7")
            }
            let recovered = try await postForm(port, "/oauth/token", call, headers: [Self.confidentialBasic])
            #expect(recovered.status == 200)
            #expect(state.oauth.tokenCalls(grant: "client_credentials") == 3)
            #expect(state.oauth.tokenErrorsByCode["injected_503"] == 2)

            let delayed = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/token-delay?ms=300")
            #expect(delayed.status == 204)
            let clock = ContinuousClock()
            let elapsed = try await clock.measure {
                let slow = try await postForm(port, "/oauth/token", call, headers: [Self.confidentialBasic])
                #expect(slow.status == 200)
            }
            #expect(elapsed >= .milliseconds(300))
            _ = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/token-delay?ms=0")
        }
    }

    @Test("resources: Bearer challenge on /oauth-api, SAP status header on /sap-api; expiry and revocation controls")
    func resourcesAndChallenges() async throws {
        try await withSimulator { port, state in
            let none = try await RawHTTP.request(port: port, method: "GET", target: "/oauth-api/a")
            #expect(none.status == 401)
            #expect(none.header("WWW-Authenticate") == "Bearer error=\"invalid_token\"")
            let sapNone = try await RawHTTP.request(port: port, method: "GET", target: "/sap-api/a")
            #expect(sapNone.status == 400)
            #expect(sapNone.header("X-SMP-AUTHENTICATION-STATUS") == "1000")
            let bogus = try await RawHTTP.request(port: port, method: "GET", target: "/oauth-api/a", headers: [("Authorization", "Bearer nope")])
            #expect(bogus.status == 401)

            let issued = try await postForm(
                port, "/oauth/token", [("grant_type", "password"), ("username", "alice"), ("password", "wonderland")],
                headers: [Self.confidentialBasic])
            let access = try #require(string(issued, "access_token"))
            let refresh = try #require(string(issued, "refresh_token"))
            let bearer = ("Authorization", "Bearer \(access)")
            let ok = try await RawHTTP.request(port: port, method: "GET", target: "/sap-api/b/c", headers: [bearer])
            #expect(ok.status == 200)
            #expect(string(ok, "path") == "/sap-api/b/c")

            let expired = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/expire-access-tokens")
            #expect(expired.status == 204)
            #expect(try await RawHTTP.request(port: port, method: "GET", target: "/oauth-api/a", headers: [bearer]).status == 401)
            #expect(try await RawHTTP.request(port: port, method: "GET", target: "/sap-api/a", headers: [bearer]).status == 400)

            let refreshed = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)], headers: [Self.confidentialBasic])
            #expect(refreshed.status == 200, "expired access tokens do not affect refresh")
            let fresh = try #require(string(refreshed, "access_token"))
            let refresh2 = try #require(string(refreshed, "refresh_token"))
            #expect(try await RawHTTP.request(port: port, method: "GET", target: "/oauth-api/a", headers: [("Authorization", "Bearer \(fresh)")]).status == 200)

            let revoked = try await RawHTTP.request(port: port, method: "POST", target: "/sim/oauth/revoke-refresh-tokens")
            #expect(revoked.status == 204)
            let dead = try await postForm(port, "/oauth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2)], headers: [Self.confidentialBasic])
            #expect(string(dead, "error") == "invalid_grant")

            #expect(state.oauth.resourceCalls == ["oauth-api": 4, "sap-api": 3])
            #expect(state.oauth.resourceRejections == ["oauth-api": 3, "sap-api": 2])
        }
    }

    @Test("short access-token lifetimes expire by themselves")
    func lifetime() async throws {
        try await withSimulator(SimulatorConfiguration(accessTokenLifetime: .milliseconds(200))) { port, state in
            let issued = try await postForm(port, "/oauth/token", [("grant_type", "client_credentials")], headers: [Self.confidentialBasic])
            #expect(issued.json?["expires_in"] as? Int == 1)
            let access = try #require(string(issued, "access_token"))
            let now = ContinuousClock.now
            #expect(state.oauth.validate(accessToken: access, now: now) != nil)
            #expect(state.oauth.validate(accessToken: access, now: now.advanced(by: .milliseconds(250))) == nil)
        }
    }

    @Test("/sim/stats returns every counter as SimulatorStats JSON")
    func stats() async throws {
        try await withSimulator { port, state in
            _ = try await RawHTTP.request(port: port, method: "GET", target: "/api/data", headers: [basicAuthorization()])
            _ = try await postForm(port, "/oauth/token", [("grant_type", "client_credentials")], headers: [Self.confidentialBasic])
            let response = try await RawHTTP.request(port: port, method: "GET", target: "/sim/stats")
            #expect(response.status == 200)
            let stats = try JSONDecoder().decode(SimulatorStats.self, from: Data(response.body))
            #expect(stats.smp.sessionsCreated == 1)
            #expect(stats.oauth.tokenCallsByGrant == ["client_credentials": 1])
            #expect(stats.requestsByRoute["GET /api/data"] == 1)
            #expect(stats.smp == state.stats.smp)
            #expect(stats.oauth == state.stats.oauth)
        }
    }
}
