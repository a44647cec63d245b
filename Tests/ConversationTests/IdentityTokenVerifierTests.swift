import AuthFlows
import Conversation
import Foundation
import Logging
import ParleyCrypto
import ParleyEncoding
import ParleyTesting
import Synchronization
import Testing
import UpstreamSimulator

/// Identity tokens against the destinations file's identity providers: every refusal names
/// its check and never the token; keys come from the provider's JWKS through the transport.
@Suite struct IdentityTokenVerifierTests {
    static let issuerURL = "https://idp.example"
    static let jwksURL = "https://idp.example/keys"

    /// What the provider's `jwksUri` answers.
    final class Published: Sendable {
        private let answer: Mutex<(status: Int, body: [UInt8])>
        init(_ answer: (status: Int, body: [UInt8])) { self.answer = Mutex(answer) }
        func withLock<T>(_ body: (inout (status: Int, body: [UInt8])) -> T) -> T { answer.withLock { body(&$0) } }
    }

    /// The provider, its published keys (replaceable, as when it rotates them) and a verifier.
    final class Fixture: Sendable {
        let signer: IdentityIssuer
        let published: Published
        let transport: FakeTransport
        let clock = TestClock()
        let verifier: IdentityTokenVerifier

        init(userClaim: String = "sub") throws {
            let signer = try IdentityIssuer()
            self.signer = signer
            let published = Published((status: 200, body: signer.jwks))
            self.published = published
            let transport = FakeTransport { request in
                let answer = published.withLock { $0 }
                return request.url == IdentityTokenVerifierTests.jwksURL ? .text(answer.status, String(decoding: answer.body, as: UTF8.self)) : .text(404)
            }
            self.transport = transport
            verifier = IdentityTokenVerifier(
                providers: [
                    IdentityProvider(
                        issuer: IdentityTokenVerifierTests.issuerURL, jwksURI: IdentityTokenVerifierTests.jwksURL, audiences: ["parley", "parley-2"],
                        userClaim: userClaim)
                ], transport: transport, clock: clock, logger: Logger(label: "test"))
        }

        var fetches: Int { transport.requests.count }
        var now: Double { clock.now.timeIntervalSince1970 }

        func claims(_ changes: [String: Any] = [:]) -> [String: Any] {
            var claims: [String: Any] = [
                "iss": IdentityTokenVerifierTests.issuerURL, "sub": "alice-123", "aud": "parley", "exp": Int(now) + 300, "iat": Int(now),
                "email": "Alice@Example.COM", "preferred_username": "alice", "groups": ["a", "b"], "email_verified": true,
            ]
            for (name, value) in changes { claims[name] = value is NSNull ? nil : value }
            return claims
        }

        func token(_ changes: [String: Any] = [:], algorithm: IdentityIssuer.Algorithm = .rs256, header: [String: Any] = [:]) throws -> String {
            try signer.token(claims(changes), algorithm: algorithm, header: header)
        }

        /// The check a refused token failed; the refusal never carries the token.
        func refusal(_ token: String) async -> IdentityTokenError.Check? {
            do {
                _ = try await verifier.verify(token)
                return nil
            } catch {
                for part in token.split(separator: ".") where part.count >= 8 {
                    #expect(!error.description.contains(part) && !error.detail.contains(part))
                }
                return error.check
            }
        }
    }

    @Test(arguments: IdentityIssuer.Algorithm.allCases)
    func eachAcceptedAlgorithmVerifies(_ algorithm: IdentityIssuer.Algorithm) async throws {
        let f = try Fixture()
        let identity = try await f.verifier.verify(try f.token(algorithm: algorithm))
        #expect(identity.issuer == Self.issuerURL && identity.subject == "alice-123")
        #expect(identity.claims["email"] == "Alice@Example.COM" && identity.claims["preferred_username"] == "alice")
        #expect(identity.claims["groups"] == nil && identity.claims["email_verified"] == nil, "only string claims")
        #expect(f.fetches == 1)
        // The key set is kept: a second token needs no fetch.
        _ = try await f.verifier.verify(try f.token(["sub": "bob"], algorithm: algorithm))
        #expect(f.fetches == 1)
    }

    @Test func anyOfTheProvidersAudiencesInAnAudienceListIsEnough() async throws {
        let f = try Fixture()
        #expect(try await f.verifier.verify(try f.token(["aud": ["someone-else", "parley-2"]])).subject == "alice-123")
        #expect(await f.refusal(try f.token(["aud": "someone-else"])) == .audience)
        #expect(await f.refusal(try f.token(["aud": ["x", "y"]])) == .audience)
        #expect(await f.refusal(try f.token(["aud": NSNull()])) == .audience)
        #expect(await f.refusal(try f.token(["aud": 7])) == .audience)
    }

    @Test func expiryAndNotBeforeAllowSixtySecondsOfSkew() async throws {
        let f = try Fixture()
        let now = Int(f.now)
        #expect(await f.refusal(try f.token(["exp": now - 61])) == .expired)
        #expect(await f.refusal(try f.token(["exp": now - 59])) == nil)
        #expect(await f.refusal(try f.token(["nbf": now + 61])) == .notYetValid)
        #expect(await f.refusal(try f.token(["nbf": now + 59])) == nil)
        #expect(await f.refusal(try f.token(["exp": NSNull()])) == .missingClaim)
        #expect(await f.refusal(try f.token(["exp": "\(now + 300)"])) == .missingClaim)
        #expect(await f.refusal(try f.token(["exp": true])) == .missingClaim)
        #expect(await f.refusal(try f.token(["nbf": "soon"])) == .malformed)
        // The clock is the injected one.
        let token = try f.token(["exp": now + 100])
        #expect(await f.refusal(token) == nil)
        f.clock.advance(by: .seconds(161))
        #expect(await f.refusal(token) == .expired)
    }

    @Test func anUnknownIssuerIsRefusedWithoutFetchingAnything() async throws {
        let f = try Fixture()
        #expect(await f.refusal(try f.token(["iss": "https://evil.example"])) == .unknownIssuer)
        #expect(await f.refusal(try f.token(["iss": Self.issuerURL + "/"])) == .unknownIssuer)
        #expect(await f.refusal(try f.token(["iss": NSNull()])) == .unknownIssuer)
        #expect(f.fetches == 0)
    }

    @Test func anUnknownKeyRefetchesTheKeySetAtMostOnceAMinute() async throws {
        let f = try Fixture()
        #expect(await f.refusal(try f.token()) == nil)
        #expect(f.fetches == 1)
        // The provider rotates to new keys: tokens name a kid Parley has not seen. Within a
        // minute of the first fetch, Parley does not ask again.
        let rotated = try IdentityIssuer()
        #expect(await f.refusal(try rotated.token(f.claims(), header: ["kid": "rotated-0"])) == .unknownKey)
        #expect(f.fetches == 1)
        f.clock.advance(by: .seconds(60))
        let newKid = try rotated.token(f.claims(), header: ["kid": "rotated-1"])
        #expect(await f.refusal(newKid) == .unknownKey)
        #expect(f.fetches == 2, "an unknown kid fetches the key set again")
        #expect(await f.refusal(try rotated.token(f.claims(), header: ["kid": "rotated-2"])) == .unknownKey)
        #expect(f.fetches == 2, "but not twice within a minute")
        // The provider now publishes the new key; within the minute Parley still refuses.
        let rotatedKeys = rotated.publicJWKs.map { key -> [String: Any] in
            var key = key
            key["kid"] = "rotated-\(key["kty"] as? String ?? "")"
            return key
        }
        let rotatedSet = Array(try JSONSerialization.data(withJSONObject: ["keys": rotatedKeys]))
        f.published.withLock { $0 = (200, rotatedSet) }
        let signedByRotated = try rotated.token(f.claims(), header: ["kid": "rotated-RSA"])
        f.clock.advance(by: .seconds(30))
        #expect(await f.refusal(signedByRotated) == .unknownKey)
        #expect(f.fetches == 2)
        f.clock.advance(by: .seconds(31))
        #expect(await f.refusal(signedByRotated) == nil, "a minute later the refetch finds the new key")
        #expect(f.fetches == 3)
        // A token without kid: the only key of its algorithm.
        #expect(await f.refusal(try rotated.token(f.claims(), algorithm: .es256, header: ["kid": NSNull()])) == nil)
        #expect(f.fetches == 3)
    }

    @Test func aKeySetAnHourOldIsFetchedAgainAndKeptWhenTheFetchFails() async throws {
        let f = try Fixture()
        #expect(await f.refusal(try f.token()) == nil)
        f.clock.advance(by: .seconds(3599))
        #expect(await f.refusal(try f.token()) == nil)
        #expect(f.fetches == 1)
        f.clock.advance(by: .seconds(2))
        f.published.withLock { $0 = (500, []) }
        #expect(await f.refusal(try f.token()) == nil, "the provider is down: the keys Parley holds still verify")
        #expect(f.fetches == 2)
    }

    /// The kept set serves while refetches fail, but for a bounded time: a key the provider
    /// withdrew is not trusted for ever. Its age is what `/metrics` shows.
    @Test func aKeySetWhoseRefetchesKeepFailingIsTrustedForSevenHoursAtMost() async throws {
        let f = try Fixture()
        #expect(await f.refusal(try f.token()) == nil)
        f.published.withLock { $0 = (503, Array("down".utf8)) }
        f.clock.advance(by: .seconds(3601))
        #expect(await f.refusal(try f.token()) == nil)
        f.clock.advance(by: .seconds(6 * 3600 - 60))
        #expect(await f.refusal(try f.token()) == nil, "six hours past its hour, still within the grace")
        let age: Double = 3601 + 6 * 3600 - 60
        #expect(f.verifier.keySetAges().map(\.seconds) == [age])
        f.clock.advance(by: .seconds(120))
        #expect(await f.refusal(try f.token()) == .keysUnavailable, "seven hours old and never refreshed")
        // The provider is back: the next refetch (a minute after the last) trusts it again.
        f.published.withLock { $0 = (200, f.signer.jwks) }
        f.clock.advance(by: .seconds(60))
        #expect(await f.refusal(try f.token()) == nil)
        #expect(f.verifier.keySetAges().map(\.seconds) == [0])
    }

    /// OpenID Connect Back-Channel Logout tokens: what makes one, and what an ID token lacks.
    @Test func aLogoutTokenNeedsItsEventJtiSubjectAndIatAndNoNonce() async throws {
        let f = try Fixture()
        let event: [String: Any] = ["http://schemas.openid.net/event/backchannel-logout": [String: Any]()]
        let good = try f.token(["events": event, "jti": "j-1"])
        let verified = try await f.verifier.verifyLogoutToken(good)
        #expect(verified.identity.subject == "alice-123" && verified.jti == "j-1")
        func check(_ changes: [String: Any]) async throws -> IdentityTokenError.Check? {
            let token = try f.token(changes)
            do {
                _ = try await f.verifier.verifyLogoutToken(token)
                return nil
            } catch {
                return error.check
            }
        }
        #expect(try await check(["jti": "j-2"]) == .missingClaim, "no events: an ID token")
        #expect(try await check(["events": ["other": [String: Any]()], "jti": "j-3"]) == .missingClaim)
        #expect(try await check(["events": event, "jti": "j-4", "nonce": "n"]) == .tokenType)
        #expect(try await check(["events": event]) == .missingClaim, "no jti")
        #expect(try await check(["events": event, "jti": "j-5", "iat": NSNull()]) == .missingClaim)
        #expect(try await check(["events": event, "jti": "j-6", "sub": NSNull()]) == .missingClaim)
        #expect(try await check(["events": event, "jti": "j-7", "aud": "someone-else"]) == .audience)
    }

    @Test func theTimesAndTheEmailsVerificationAreRead() async throws {
        let f = try Fixture()
        let identity = try await f.verifier.verify(try f.token(["auth_time": Int(f.now) - 600]))
        #expect(identity.issuedAt == Date(timeIntervalSince1970: Double(Int(f.now))))
        #expect(identity.authTime == Date(timeIntervalSince1970: Double(Int(f.now) - 600)))
        #expect(identity.emailVerified)
        #expect(identity.matchValue(claim: "email") == "Alice@Example.COM")
        let unverified = try await f.verifier.verify(try f.token(["email_verified": false]))
        #expect(!unverified.emailVerified)
        #expect(unverified.matchValue(claim: "email") == nil)
        #expect(unverified.matchValue(claim: "sub") == "alice-123")
        // A time no clock reaches counts as absent: it is never turned into whole seconds.
        let far = try await f.verifier.verify(try f.token(["iat": 1e300, "auth_time": -5]))
        #expect(far.issuedAt == nil && far.authTime == nil)
        // Some providers write the flag as a string.
        #expect(try await f.verifier.verify(try f.token(["email_verified": "true"])).emailVerified)
    }

    @Test func concurrentVerificationsShareOneFetch() async throws {
        let f = try Fixture()
        let token = try f.token()
        let subjects = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<20 { group.addTask { try await f.verifier.verify(token).subject } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(subjects == Array(repeating: "alice-123", count: 20))
        #expect(f.fetches == 1)
    }

    @Test func keysThatCannotBeFetchedAreNamedAndRetriedAtMostOnceAMinute() async throws {
        let f = try Fixture()
        f.published.withLock { $0 = (503, Array("down".utf8)) }
        #expect(await f.refusal(try f.token()) == .keysUnavailable)
        #expect(await f.refusal(try f.token()) == .keysUnavailable)
        #expect(f.fetches == 1)
        f.published.withLock { $0 = (200, Array("{\"keys\": 7}".utf8)) }
        f.clock.advance(by: .seconds(60))
        #expect(await f.refusal(try f.token()) == .keysUnavailable, "a document that is not a key set")
        #expect(f.fetches == 2)
        f.published.withLock { $0 = (200, f.signer.jwks) }
        f.clock.advance(by: .seconds(60))
        #expect(await f.refusal(try f.token()) == nil)
        #expect(f.fetches == 3)
    }

    @Test func aSignatureThatDoesNotVerifyIsRefused() async throws {
        let f = try Fixture()
        // Another key under the provider's kid.
        let impostor = try IdentityIssuer()
        for algorithm in IdentityIssuer.Algorithm.allCases {
            #expect(await f.refusal(try impostor.token(f.claims(), algorithm: algorithm)) == .signature)
        }
        // Claims changed after signing.
        let token = try f.token()
        let parts = token.split(separator: ".").map(String.init)
        let forged = parts[0] + "." + IdentityIssuer.encode(f.claims(["sub": "mallory"])) + "." + parts[2]
        #expect(await f.refusal(forged) == .signature)
        // A signature of the right length with one bit flipped.
        var signature = try #require(Base64.decode(parts[2]))
        signature[10] ^= 1
        #expect(await f.refusal(parts[0] + "." + parts[1] + "." + Base64URL.encode(signature)) == .signature)
        #expect(await f.refusal(parts[0] + "." + parts[1] + ".") == .signature)
    }

    @Test func algNoneAndEveryHMACAreRefused() async throws {
        let f = try Fixture()
        let claims = IdentityIssuer.encode(f.claims())
        for alg in ["none", "None", "NONE", "HS256", "HS384", "HS512", "RS384", "ES384", "EdDSA", ""] {
            let header = IdentityIssuer.encode(["alg": alg, "typ": "JWT", "kid": IdentityIssuer.rsaKeyID])
            #expect(await f.refusal(header + "." + claims + ".") == .algorithm, "\(alg)")
            #expect(await f.refusal(header + "." + claims + "." + Base64URL.encode(Array(repeating: 7, count: 32))) == .algorithm, "\(alg)")
        }
        let noAlg = IdentityIssuer.encode(["typ": "JWT"]) + "." + claims + "."
        #expect(await f.refusal(noAlg) == .algorithm)
        #expect(f.fetches == 0)
    }

    /// The classic confusion: HS256 "signed" with the public key as the HMAC secret, in every
    /// form a library might hand it over (PEM, the JWK's JSON, the modulus).
    @Test func hs256SignedWithThePublicKeyIsRefused() async throws {
        let f = try Fixture()
        let rsaJWK = try #require(f.signer.publicJWKs.first { $0["kty"] as? String == "RSA" })
        let secrets: [[UInt8]] = [
            Array(f.signer.rsaPublicKeyPEM.utf8), Array(try JSONSerialization.data(withJSONObject: rsaJWK, options: [.sortedKeys])),
            try #require(Base64.decode(rsaJWK["n"] as? String ?? "")), f.signer.jwks,
        ]
        for secret in secrets {
            let input = IdentityIssuer.encode(["alg": "HS256", "typ": "JWT", "kid": IdentityIssuer.rsaKeyID]) + "." + IdentityIssuer.encode(f.claims())
            let token = input + "." + Base64URL.encode(HMACSHA256.authenticate(Array(input.utf8), key: secret))
            #expect(await f.refusal(token) == .algorithm)
        }
    }

    @Test func aKeyIsUsedOnlyForItsOwnAlgorithm() async throws {
        let f = try Fixture()
        // ES256 naming the RSA key, RS256 naming the EC key.
        let es = try f.signer.token(f.claims(), algorithm: .es256, header: ["kid": IdentityIssuer.rsaKeyID])
        let rs = try f.signer.token(f.claims(), algorithm: .rs256, header: ["kid": IdentityIssuer.ecKeyID])
        #expect(await f.refusal(es) == .algorithm)
        #expect(await f.refusal(rs) == .algorithm)
        #expect(f.fetches == 1, "a known kid for another algorithm does not refetch")
    }

    @Test func truncatedOversizedAndGarbageTokensAreRefused() async throws {
        let f = try Fixture()
        let token = try f.token()
        #expect(await f.refusal(String(token.dropLast(4))) == .signature)
        #expect(await f.refusal(String(token.dropLast(1))) == .malformed)
        let parts = token.split(separator: ".")
        #expect(await f.refusal(parts[0] + "." + parts[1].prefix(parts[1].count / 2)) == .malformed)
        #expect(await f.refusal(parts[0] + "." + parts[1].prefix(12) + "." + parts[2]) == .malformed)
        #expect(await f.refusal(String(token.prefix(while: { $0 != "." }))) == .malformed)
        let huge = try f.token(["padding": String(repeating: "x", count: 40 * 1024)])
        #expect(huge.utf8.count > 40 * 1024)
        #expect(await f.refusal(huge) == .tooLarge)
        for garbage in [
            "", ".", "..", "...", "a.b.c", "not a token", "eyJ.eyJ.x", "a.b.c.d", String(repeating: "A", count: 16 * 1024),
            IdentityIssuer.encode(["alg": "RS256"]) + ".e30=.sig", IdentityIssuer.encode(["alg": "RS256"]) + "." + Base64URL.encode(Array("[1]".utf8)) + ".c2ln",
            Base64URL.encode(Array("[\"alg\"]".utf8)) + "." + IdentityIssuer.encode(f.claims()) + ".c2ln",
            String(decoding: (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 37) }, as: UTF8.self),
        ] {
            #expect(await f.refusal(garbage) == .malformed, "\(garbage.prefix(40))")
        }
        let critical = try f.token(header: ["crit": ["exp"], "exp": 1])
        #expect(await f.refusal(critical) == .malformed)
        #expect(await f.refusal(try f.token(header: ["kid": 7])) == .malformed)
        #expect(f.fetches == 1, "only the tokens that reached the key lookup fetched")
    }

    @Test func theUserClaimNamesTheSubject() async throws {
        let f = try Fixture(userClaim: "email")
        #expect(try await f.verifier.verify(try f.token()).subject == "Alice@Example.COM")
        #expect(await f.refusal(try f.token(["email": NSNull()])) == .missingClaim)
        #expect(await f.refusal(try f.token(["email": ""])) == .missingClaim)
        #expect(await f.refusal(try f.token(["email": ["a@b"]])) == .missingClaim)
    }

    @Test func aUserNameLongerThanAnyIssuersIsRefused() async throws {
        let f = try Fixture()
        #expect(try await f.verifier.verify(try f.token(["sub": String(repeating: "a", count: 1024)])).subject.utf8.count == 1024)
        #expect(await f.refusal(try f.token(["sub": String(repeating: "a", count: 1025)])) == .malformed)
    }

    /// An agent's access token (RFC 9068): `typ` at+jwt, the resource as `aud`, the client, the
    /// actor and the scopes; an ID token of the same provider is not one.
    @Test func accessTokensNeedTheirTypeTheResourceAndAClient() async throws {
        let f = try Fixture()
        let resource = "https://parley.example"
        func access(_ changes: [String: Any], typ: Any = "at+jwt") throws -> String {
            var all: [String: Any] = ["aud": resource, "client_id": "assistant", "scope": "orders.read orders.write"]
            for (name, value) in changes { all[name] = value }
            return try f.token(all, header: ["typ": typ])
        }
        let verifier = f.verifier
        func refusal(_ token: String) async -> IdentityTokenError.Check? {
            do {
                let accepted = try await verifier.verifyAccessToken(token, resources: [resource])
                return accepted.client.isEmpty ? .missingClaim : nil
            } catch {
                return error.check
            }
        }
        let accepted = try await f.verifier.verifyAccessToken(
            try access(["act": ["sub": "gateway-1", "act": ["sub": "deeper"]], "scp": ["admin"]]), resources: [resource])
        #expect(accepted.client == "assistant" && accepted.actor == "gateway-1" && accepted.identity.subject == "alice-123")
        #expect(accepted.scopes == ["orders.read", "orders.write", "admin"])
        #expect(try await f.verifier.verifyAccessToken(try access([:], typ: "application/AT+JWT"), resources: [resource]).client == "assistant")
        #expect(try await f.verifier.verifyAccessToken(try access(["client_id": NSNull(), "azp": "other"]), resources: [resource]).client == "other")
        #expect(await refusal(try access([:], typ: "JWT")) == .tokenType)
        #expect(await refusal(try access([:], typ: NSNull())) == .tokenType)
        #expect(await refusal(try access([:], typ: 7)) == .tokenType)
        #expect(await refusal(try access(["aud": "parley"])) == .audience, "an audience of identity tokens is not the resource")
        #expect(await refusal(try access(["client_id": NSNull()])) == .missingClaim)
        #expect(await refusal(try access(["client_id": 42])) == .missingClaim)
        #expect(await refusal(try access(["act": "gateway"])) == .malformed)
        #expect(await refusal(try access(["act": ["sub": 1]])) == .malformed)
        #expect(await refusal(try access(["exp": Int(f.now) - 120])) == .expired)
    }

    @Test func keySetsAreReadLeniently() async throws {
        let f = try Fixture()
        var keys = f.signer.publicJWKs
        keys.insert(["kty": "oct", "k": "c2VjcmV0", "kid": IdentityIssuer.rsaKeyID, "alg": "HS256"], at: 0)
        keys.append(["kty": "RSA", "use": "enc", "kid": "enc-1", "n": "AQAB", "e": "AQAB"])
        keys.append(["kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"])
        keys.append(["kty": "RSA", "kid": 12, "n": 5])
        let set = Array(try JSONSerialization.data(withJSONObject: ["keys": keys]))
        f.published.withLock { $0 = (200, set) }
        for algorithm in IdentityIssuer.Algorithm.allCases {
            #expect(await f.refusal(try f.token(algorithm: algorithm)) == nil, "\(algorithm)")
        }
        #expect(f.fetches == 1)
    }
}
