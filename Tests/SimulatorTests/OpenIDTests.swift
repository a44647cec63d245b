import Foundation
import ParleyEncoding
import ParleyTesting
import Testing
import UpstreamSimulator

/// The simulator's authorization server as an OpenID Connect provider: `id_token`s signed with
/// the keys at `/oauth/jwks`, `/oauth/userinfo`, a second user, and a login session that answers
/// later authorization requests at once unless they carry `prompt=login`.
@Suite("OpenID Connect at the simulator's authorization server")
struct OpenIDTests {
    static let redirectURI = "https://app.example/cb"

    /// Signs in as `username` with `scope` and `nonce`, and redeems the code; the token answer.
    static func signIn(
        _ port: Int, username: String = "alice", password: String = "wonderland", scope: String = "openid read", nonce: String? = "n-1"
    ) async throws -> RawHTTPResponse {
        let pkce = pkcePair()
        var pairs = [
            ("response_type", "code"), ("client_id", "parley-public"), ("redirect_uri", redirectURI), ("state", "s"),
            ("code_challenge", pkce.challenge), ("code_challenge_method", "S256"), ("scope", scope), ("username", username),
            ("password", password),
        ]
        if let nonce { pairs.append(("nonce", nonce)) }
        let login = try await postForm(port, "/oauth/authorize", pairs)
        guard login.status == 302, let code = login.header("Location").flatMap({ queryItems($0)["code"] }) else {
            throw TestFailure("login answered \(login.status): \(login.text)")
        }
        return try await redeem(port, code: code, verifier: pkce.verifier)
    }

    static func redeem(_ port: Int, code: String, verifier: String) async throws -> RawHTTPResponse {
        try await postForm(
            port, "/oauth/token",
            [
                ("grant_type", "authorization_code"), ("client_id", "parley-public"), ("code", code), ("redirect_uri", redirectURI),
                ("code_verifier", verifier),
            ])
    }

    static func jwks(_ port: Int) async throws -> [UInt8] {
        let response = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/jwks")
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/jwk-set+json")
        return response.body
    }

    @Test("a code granted with openid brings an id_token signed with a key of /oauth/jwks, naming the user and echoing the nonce")
    func idToken() async throws {
        try await withSimulator { port, state in
            let before = Int(Date().timeIntervalSince1970)
            let tokens = try await Self.signIn(port)
            #expect(tokens.status == 200)
            let idToken = try #require(string(tokens, "id_token"))
            let header = try #require(
                (try? JSONSerialization.jsonObject(with: Data(Base64.decode(String(idToken.split(separator: ".")[0])) ?? []))) as? [String: Any])
            #expect(header["alg"] as? String == "RS256")
            #expect(header["kid"] as? String == IdentityIssuer.rsaKeyID)
            let claims = try #require(IdentityIssuer.verifiedClaims(idToken, jwks: try await Self.jwks(port)), "the signature verifies")
            #expect(claims["iss"] as? String == "http://127.0.0.1:\(port)")
            #expect(claims["aud"] as? String == "parley-public")
            #expect(claims["sub"] as? String == "alice")
            #expect(claims["nonce"] as? String == "n-1")
            let issuedAt = try #require(claims["iat"] as? Int)
            let expiry = try #require(claims["exp"] as? Int)
            #expect(issuedAt >= before && issuedAt <= before + 60)
            #expect(expiry == issuedAt + 300)
            #expect(state.oauth.idTokensIssued == 1)
            #expect(state.oauth.issuedTokenValues.contains(idToken), "tests grep for leaks of id_tokens too")

            // Another key set does not verify it; a changed claim breaks the signature.
            let other = try IdentityIssuer()
            #expect(IdentityIssuer.verifiedClaims(idToken, jwks: other.jwks) == nil)
            let parts = idToken.split(separator: ".").map(String.init)
            let forged = parts[0] + "." + IdentityIssuer.encode(["iss": claims["iss"]!, "sub": "mallory", "aud": "parley-public"]) + "." + parts[2]
            #expect(IdentityIssuer.verifiedClaims(forged, jwks: try await Self.jwks(port)) == nil)

            // Without openid: no id_token; without a nonce: none in the token.
            #expect(string(try await Self.signIn(port, scope: "read"), "id_token") == nil)
            let noNonce = try #require(string(try await Self.signIn(port, nonce: nil), "id_token"))
            #expect(IdentityIssuer.verifiedClaims(noNonce, jwks: try await Self.jwks(port))?["nonce"] == nil)
            #expect(state.oauth.idTokensIssued == 2)
        }
    }

    @Test("the issuer is configurable")
    func configuredIssuer() async throws {
        try await withSimulator(SimulatorConfiguration(oauthIssuer: "https://as.example")) { port, _ in
            let idToken = try #require(string(try await Self.signIn(port), "id_token"))
            #expect(IdentityIssuer.verifiedClaims(idToken, jwks: try await Self.jwks(port))?["iss"] as? String == "https://as.example")
        }
    }

    @Test("bob / builder is a second user; oauthUsers replaces him; the password grant knows them too")
    func users() async throws {
        try await withSimulator { port, state in
            let idToken = try #require(string(try await Self.signIn(port, username: "bob", password: "builder"), "id_token"))
            #expect(IdentityIssuer.verifiedClaims(idToken, jwks: try await Self.jwks(port))?["sub"] as? String == "bob")
            // Bob's name with alice's password is nobody.
            let wrong = try await authorize(port, redirectURI: Self.redirectURI, challenge: pkcePair().challenge, username: "bob", password: "wonderland")
            #expect(wrong.status == 200)
            #expect(wrong.text.contains("Wrong username or password."))
            #expect(state.oauth.authorizeFailures == 1)
            let page = try await RawHTTP.request(
                port: port, method: "GET",
                target: "/oauth/authorize?response_type=code&client_id=parley-public&code_challenge=\(pkcePair().challenge)"
                    + "&code_challenge_method=S256&redirect_uri=\(urlEncode(Self.redirectURI))")
            #expect(page.text.contains("<b>bob</b> / <b>builder</b>"))
            let password = try await postForm(
                port, "/oauth/token",
                [("grant_type", "password"), ("username", "bob"), ("password", "builder")], headers: [OAuth2Tests.confidentialBasic])
            #expect(password.status == 200)
        }
        let carol = SimulatorConfiguration(oauthUsers: [SimulatorUser(username: "carol", password: "c4rol")])
        try await withSimulator(carol) { port, _ in
            let idToken = try #require(string(try await Self.signIn(port, username: "carol", password: "c4rol"), "id_token"))
            #expect(IdentityIssuer.verifiedClaims(idToken, jwks: try await Self.jwks(port))?["sub"] as? String == "carol")
            let bob = try await authorize(port, redirectURI: Self.redirectURI, challenge: pkcePair().challenge, username: "bob", password: "builder")
            #expect(bob.status == 200, "bob is not a user here")
            // alice, the Basic user, always is.
            #expect(try await Self.signIn(port).status == 200)
        }
    }

    @Test("userinfo names the access token's user; no token or a token without openid is refused")
    func userinfo() async throws {
        try await withSimulator { port, state in
            let bob = try await Self.signIn(port, username: "bob", password: "builder")
            let access = try #require(string(bob, "access_token"))
            for method in ["GET", "POST"] {
                let info = try await RawHTTP.request(port: port, method: method, target: "/oauth/userinfo", headers: [("Authorization", "Bearer \(access)")])
                #expect(info.status == 200)
                #expect(info.json?.count == 1)
                #expect(string(info, "sub") == "bob")
            }
            let none = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/userinfo")
            #expect(none.status == 401)
            #expect(none.header("WWW-Authenticate") == "Bearer error=\"invalid_token\"")
            let forged = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/userinfo", headers: [("Authorization", "Bearer at_forged")])
            #expect(forged.status == 401)
            let plain = try #require(string(try await Self.signIn(port, scope: "read"), "access_token"))
            let scope = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/userinfo", headers: [("Authorization", "Bearer \(plain)")])
            #expect(scope.status == 403)
            #expect(scope.header("WWW-Authenticate")?.contains("insufficient_scope") == true)
            state.oauth.expireAccessTokens()
            let expired = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/userinfo", headers: [("Authorization", "Bearer \(access)")])
            #expect(expired.status == 401)
            #expect(state.oauth.userinfoCalls == 6)
            #expect(state.oauth.userinfoRejections == 4)
        }
    }

    @Test("a login session answers the next authorization request at once, unless it says prompt=login; prompt=none needs one")
    func loginSession() async throws {
        try await withSimulator { port, state in
            let pkce = pkcePair()
            let query =
                "response_type=code&client_id=parley-public&redirect_uri=\(urlEncode(Self.redirectURI))&state=again"
                + "&code_challenge=\(pkce.challenge)&code_challenge_method=S256&scope=openid&nonce=n-2"
            // No session: prompt=none cannot be answered without a page.
            let silentWithout = try await RawHTTP.request(port: port, method: "GET", target: "/oauth/authorize?" + query + "&prompt=none")
            #expect(silentWithout.status == 302)
            #expect(queryItems(silentWithout.header("Location") ?? "")["error"] == "login_required")
            #expect(queryItems(silentWithout.header("Location") ?? "")["state"] == "again")

            let login = try await authorize(
                port, redirectURI: Self.redirectURI, challenge: pkcePair().challenge, scope: "openid", username: "bob", password: "builder")
            #expect(login.status == 302)
            let session = try #require(setCookie("AS_SESSION", in: login))
            let cookieHeader = try #require(login.headers("Set-Cookie").first { $0.hasPrefix("AS_SESSION=") })
            #expect(cookieHeader.contains("Path=/oauth") && cookieHeader.contains("HttpOnly"))
            #expect(state.oauth.loginSessions == 1)
            let pages = state.oauth.authorizePages

            // With the session: the code at once, for bob, no login page.
            let silent = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?" + query, headers: [("Cookie", "AS_SESSION=\(session)")])
            #expect(silent.status == 302)
            let location = try #require(silent.header("Location"))
            #expect(location.hasPrefix(Self.redirectURI + "?code="))
            #expect(queryItems(location)["state"] == "again")
            #expect(state.oauth.silentAuthorizations == 1)
            #expect(state.oauth.authorizePages == pages)
            let tokens = try await Self.redeem(port, code: try #require(queryItems(location)["code"]), verifier: pkce.verifier)
            let claims = IdentityIssuer.verifiedClaims(try #require(string(tokens, "id_token")), jwks: try await Self.jwks(port))
            #expect(claims?["sub"] as? String == "bob")
            #expect(claims?["nonce"] as? String == "n-2")

            // prompt=login shows the login page despite the session.
            let forced = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?" + query + "&prompt=login", headers: [("Cookie", "AS_SESSION=\(session)")])
            #expect(forced.status == 200)
            #expect(forced.text.contains(#"id="username""#))
            #expect(forced.text.contains(#"name="nonce" value="n-2""#), "the nonce survives the login form")
            #expect(!forced.text.contains(#"name="prompt""#), "the login answers; it does not ask again")
            #expect(state.oauth.silentAuthorizations == 1)

            // An unknown or expired session is no session.
            let unknown = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?" + query, headers: [("Cookie", "AS_SESSION=ass_forged")])
            #expect(unknown.status == 200)
            #expect(try await RawHTTP.request(port: port, method: "POST", target: "/sim/sessions/expire").status == 204)
            #expect(state.oauth.loginSessions == 0)
            let expired = try await RawHTTP.request(
                port: port, method: "GET", target: "/oauth/authorize?" + query, headers: [("Cookie", "AS_SESSION=\(session)")])
            #expect(expired.status == 200)
            #expect(expired.text.contains(#"id="username""#))
            #expect(state.oauth.silentAuthorizations == 1)
            #expect(state.stats.oauth.silentAuthorizations == 1)
            #expect(state.stats.oauth.userinfoCalls == 0)
        }
    }

    @Test("in Chromium: the second authorization request of a signed-in browser skips the login page; prompt=login shows it")
    func loginSessionInBrowser() async throws {
        try await withSimulator { port, state in
            let base = "http://127.0.0.1:\(port)"
            let redirectURI = base + "/echo/cb"
            func authorizeURL(_ state: String, prompt: String? = nil) -> String {
                base + "/oauth/authorize?response_type=code&client_id=parley-public&redirect_uri=\(urlEncode(redirectURI))"
                    + "&state=\(state)&code_challenge=\(pkcePair().challenge)&code_challenge_method=S256&scope=openid"
                    + (prompt.map { "&prompt=\($0)" } ?? "")
            }
            try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: authorizeURL("first"))
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "#login"))
                _ = try await browser.waitForURL(prefix: redirectURI + "?code=", timeout: .seconds(20))
                try await browser.navigate(to: authorizeURL("second"))
                let second = try await browser.waitForURL(prefix: redirectURI + "?code=", timeout: .seconds(20))
                #expect(queryItems(second)["state"] == "second")
                try await browser.navigate(to: authorizeURL("third", prompt: "login"))
                _ = try await browser.findElement(css: "#username")
            }
            #expect(state.oauth.authorizeLogins == 1)
            #expect(state.oauth.silentAuthorizations == 1)
            #expect(state.oauth.authorizePages == 2)
        }
    }
}
