import Foundation
import ParleyEncoding
import ParleyTesting
import Testing
import UpstreamSimulator

/// The demo identity provider: its key set at `/idp/jwks` and the identity tokens
/// `POST /control/identity-token` mints with it.
@Suite("the simulator's demo identity provider")
struct IdentityProviderTests {
    static func mint(_ port: Int, _ object: [String: Any]) async throws -> RawHTTPResponse {
        try await RawHTTP.request(
            port: port, method: "POST", target: "/control/identity-token", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    static func header(_ token: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(Base64.decode(String(token.split(separator: ".")[0])) ?? []))) as? [String: Any] ?? [:]
    }

    @Test("a minted token is signed with a key of /idp/jwks and carries the claims asked for, the issuer the simulator's address")
    func mintedTokens() async throws {
        try await withSimulator { port, state in
            let jwks = try await RawHTTP.request(port: port, method: "GET", target: "/idp/jwks")
            #expect(jwks.status == 200 && jwks.header("Content-Type") == "application/jwk-set+json")
            let keys = try #require((jwks.json?["keys"] as? [[String: Any]]))
            #expect(Set(keys.compactMap { $0["kid"] as? String }) == [IdentityIssuer.rsaKeyID, IdentityIssuer.ecKeyID])
            #expect(keys.allSatisfy { $0["d"] == nil && $0["p"] == nil }, "public keys only")

            let before = Int(Date().timeIntervalSince1970)
            let minted = try await Self.mint(port, ["sub": "alice-1", "aud": "parley", "email": "alice@example.com", "claims": ["upn": "alice@corp"]])
            #expect(minted.status == 200)
            let token = try #require(string(minted, "token"))
            #expect(Self.header(token)["alg"] as? String == "RS256")
            let claims = try #require(IdentityIssuer.verifiedClaims(token, jwks: jwks.body), "the signature verifies with the published key")
            #expect(claims["iss"] as? String == "http://127.0.0.1:\(port)")
            #expect(claims["sub"] as? String == "alice-1" && claims["aud"] as? String == "parley")
            #expect(claims["email"] as? String == "alice@example.com" && claims["upn"] as? String == "alice@corp")
            let issuedAt = try #require(claims["iat"] as? Int)
            #expect(issuedAt >= before - 1 && issuedAt <= before + 60)
            #expect(claims["exp"] as? Int == issuedAt + 600)
            #expect(claims["nbf"] == nil)
            // The keys stay for the simulator's life: the set does not change between calls.
            #expect(try await RawHTTP.request(port: port, method: "GET", target: "/idp/jwks").body == jwks.body)
            #expect(state.requests(route: "POST /control/identity-token") == 1)

            // Everything given is taken as given.
            let custom = try await Self.mint(
                port, ["sub": "bob", "aud": ["a", "b"], "iss": "https://other.example", "exp": 1_900_000_000, "nbf": 1_800_000_000, "alg": "ES256"])
            let customToken = try #require(string(custom, "token"))
            #expect(Self.header(customToken)["alg"] as? String == "ES256" && Self.header(customToken)["kid"] as? String == IdentityIssuer.ecKeyID)
            let customClaims = (try? JSONSerialization.jsonObject(with: Data(Base64.decode(String(customToken.split(separator: ".")[1])) ?? []))) as? [String: Any]
            #expect(customClaims?["iss"] as? String == "https://other.example" && customClaims?["aud"] as? [String] == ["a", "b"])
            #expect(customClaims?["exp"] as? Int == 1_900_000_000 && customClaims?["nbf"] as? Int == 1_800_000_000)
            let ps = try await Self.mint(port, ["sub": "c", "aud": "p", "alg": "PS256"])
            #expect(Self.header(try #require(string(ps, "token")))["alg"] as? String == "PS256")
        }
    }

    @Test("a body that is not a token request, or another algorithm, is refused")
    func refusals() async throws {
        try await withSimulator { port, _ in
            for object: [String: Any] in [["aud": "parley"], ["sub": "a"], ["sub": 1, "aud": "p"], ["sub": "a", "aud": 7], ["sub": "a", "aud": "p", "alg": "HS256"], ["sub": "a", "aud": "p", "alg": "none"]] {
                #expect(try await Self.mint(port, object).status == 400, "\(object)")
            }
            let garbage = try await RawHTTP.request(port: port, method: "POST", target: "/control/identity-token", body: Array("not json".utf8))
            #expect(garbage.status == 400)
        }
    }

    @Test("with idpBaseURL the tokens name it as their issuer")
    func configuredIssuer() async throws {
        var configuration = SimulatorConfiguration()
        configuration.idpBaseURL = "https://idp.demo.example"
        try await withSimulator(configuration) { port, _ in
            let token = try #require(string(try await Self.mint(port, ["sub": "a", "aud": "p"]), "token"))
            let claims = try #require(IdentityIssuer.verifiedClaims(token, jwks: try await RawHTTP.request(port: port, method: "GET", target: "/idp/jwks").body))
            #expect(claims["iss"] as? String == "https://idp.demo.example")
        }
    }
}
