import AuthFlows
import Foundation
import ParleyTesting
import Testing
import UpstreamSimulator

/// The destinations file's propagation grants: each field only where its grant reads it, a
/// verified user required, and the settings as a grant sends them.
@Suite struct PropagationDocumentTests {
    static let providers = """
        identityProviders:
          - { issuer: "https://idp.example", jwksUri: "https://idp.example/jwks", audiences: [parley] }
        """

    static func problems(_ destinations: String) -> [String] {
        do {
            _ = try DestinationsDocument.read(Self.providers + "\ndestinations:\n" + destinations)
            return []
        } catch {
            return error.problems
        }
    }

    @Test func everyMisplacedOrWrongFieldIsAProblem() {
        let found = Self.problems(
            """
              - name: open
                url: https://a.example
                oauth2: { grant: token_exchange, tokenEndpoint: "https://as.example/token", clientId: c }
              - name: cc
                url: https://b.example
                oauth2: { grant: client_credentials, tokenEndpoint: "https://as.example/token", clientId: c, clientSecret: s, audience: x, assertion: parley }
              - name: x
                url: https://c.example
                registration: { identity: required }
                oauth2: { grant: token_exchange, tokenEndpoint: "https://as.example/token", clientId: c, subjectTokenType: saml2, resource: "not a url", subjectClaim: email }
              - name: j
                url: https://d.example
                registration: { identity: required }
                oauth2: { grant: jwt_bearer, tokenEndpoint: "https://as.example/token", clientId: c, assertion: mine, assertionAudience: "" }
              - name: k
                url: https://f.example
                registration: { identity: required }
                oauth2: { grant: jwt_bearer, tokenEndpoint: "https://as.example/token", clientId: c, subjectClaim: email }
              - name: s
                url: https://e.example
                registration: { identity: required }
                oauth2: { grant: saml2_bearer, tokenEndpoint: "https://as.example/token", clientId: c, nameIdClaim: "" }
              - name: t
                url: https://g.example
                registration: { identity: required }
                oauth2: { grant: saml_bearer, tokenEndpoint: "https://as.example/token", clientId: c, samlAudience: x }
            """)
        #expect(
            found == [
                "destination 'open': oauth2.grant token_exchange speaks for a verified user, so it needs registration: {identity: required}",
                "destination 'cc': oauth2.audience is read by the token_exchange grant only",
                "destination 'cc': oauth2.assertion is read by the jwt_bearer grant only",
                "destination 'x': oauth2.subjectClaim is read by the jwt_bearer grant only",
                "destination 'x': oauth2.resource must be an absolute http(s) URL",
                "destination 'x': oauth2.subjectTokenType must be jwt, id_token or access_token (or its urn:ietf:params:oauth:token-type: name)",
                "destination 'j': oauth2.assertion must be identity_token or parley",
                "destination 'j': oauth2.assertionAudience must be 1 to 2000 bytes",
                "destination 'k': oauth2.assertionAudience and subjectClaim shape Parley's own assertion (assertion: parley)",
                "destination 's': oauth2.saml2_bearer needs samlAudience (the authorization server's entity id, at most 1024 bytes)",
                "destination 's': oauth2.nameIdClaim must be a claim name of 1 to 200 bytes",
                "destination 't': oauth2.grant must be authorization_code, client_credentials, password, token_exchange, jwt_bearer or saml2_bearer",
                "destination 't': oauth2.samlAudience is read by the saml2_bearer grant only",
            ], "\(found)")
    }

    @Test func theSettingsAreWhatTheGrantSends() throws {
        let destinations = try DestinationsDocument.read(
            Self.providers + """

                destinations:
                  - name: x
                    url: https://c.example
                    registration: { identity: required }
                    oauth2: { grant: token_exchange, tokenEndpoint: "https://as.example/token", clientId: c, audience: orders, subjectTokenType: id_token }
                  - name: j
                    url: https://d.example
                    registration: { identity: required }
                    oauth2: { grant: jwt_bearer, tokenEndpoint: "https://as.example/token", clientId: c, assertion: parley }
                """)
        let exchange = try #require(destinations.first { $0.name == "x" }?.oauth2?.propagation)
        #expect(exchange.audience == "orders" && exchange.subjectTokenType == "urn:ietf:params:oauth:token-type:id_token")
        let bearer = try #require(destinations.first { $0.name == "j" }?.oauth2?.propagation)
        #expect(bearer.assertion == .parley && bearer.assertionAudience == "https://as.example/token" && bearer.subjectClaim == "sub")
    }

    /// Signing keys: both kinds read, a ring published whole, every bad entry refused by kid and
    /// path, never with key material.
    @Test func signingKeysAreReadOrRefusedByKidAndPath() throws {
        let keys = try TestSigningKeys.generate()
        defer { keys.remove() }
        func read(_ path: String) -> [UInt8]? { FileManager.default.contents(atPath: path).map { Array($0) } }
        let ring = try ParleySigningKeys.parse("a:\(keys.ecKeyPath), b:\(keys.rsaKeyPath)", read: read)
        #expect(ring.signingKid == "a" && ring.entries.map(\.algorithm) == [.es256, .rs256])
        let published = try #require(try JSONSerialization.jsonObject(with: Data(ring.jwks)) as? [String: [[String: String]]])
        #expect(published["keys"]?.map { $0["kid"] } == ["a", "b"])
        #expect(published["keys"]?.allSatisfy { $0["d"] == nil && $0["p"] == nil } == true, "private members were published")

        let pem = String(decoding: read(keys.rsaKeyPath) ?? [], as: UTF8.self)
        // The EC key beside the RSA key's certificate.
        let mismatched = keys.directory + "/mismatched.pem"
        try Data((read(keys.ecKeyPath) ?? []) + (read(keys.directory + "/rsa.crt") ?? [])).write(to: URL(fileURLWithPath: mismatched))
        // Only a key with its certificate is in the SAML metadata.
        let withCertificate = try ParleySigningKeys.parse("a:\(keys.ecKeyPath),b:\(keys.rsaKeyWithCertificatePath)", read: read)
        let metadata = try #require(withCertificate.samlMetadata(entityID: "https://parley.example/a&b"))
        #expect(metadata.contains(#"entityID="https://parley.example/a&amp;b""#))
        #expect(metadata.components(separatedBy: "<ds:X509Certificate>").count == 2)
        #expect(ring.samlMetadata(entityID: "x") == nil)
        let cases: [(String, String)] = [
            ("", "no key is listed"),
            ("nokid", "is not kid:<path>"),
            ("bad kid!:\(keys.rsaKeyPath)", "must be 1 to 64 letters"),
            ("a:\(keys.rsaKeyPath),a:\(keys.ecKeyPath)", "listed twice"),
            ("a:/nonexistent/key.pem", "cannot be read"),
            ("a:\(keys.directory)", "cannot be read"),
            ("a:/etc/hostname", "is not a PEM private key"),
            ("a:\(mismatched)", "is not the key's"),
        ]
        for (text, expected) in cases {
            #expect {
                try ParleySigningKeys.parse(text, read: read)
            } throws: { error in
                let description = "\(error)"
                return description.contains(expected) && !description.contains(pem.dropFirst(40).prefix(30))
            }
        }
    }

    /// Parley's assertion verifies with the key it publishes, and says what RFC 7523 asks.
    @Test func theAssertionCarriesTheClaimsRFC7523Asks() async throws {
        let keys = try TestSigningKeys.generate()
        defer { keys.remove() }
        let ring = try ParleySigningKeys.parse("s1:\(keys.rsaKeyPath)") { FileManager.default.contents(atPath: $0).map { Array($0) } }
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let jwt = try await ring.assertion(issuer: "https://parley.example", subject: "alice@example.com", audience: "https://as.example/token", now: now)
        #expect(IdentityIssuer.verifiedClaims(jwt, jwks: ring.jwks) != nil, "the assertion does not verify with the published key")
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        func object(_ part: String) throws -> [String: Any] {
            var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while text.count % 4 != 0 { text += "=" }
            let data = try #require(Data(base64Encoded: text))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        let header = try object(parts[0])
        #expect(header["alg"] as? String == "RS256" && header["kid"] as? String == "s1" && header["typ"] as? String == "JWT")
        let claims = try object(parts[1])
        #expect(claims["iss"] as? String == "https://parley.example" && claims["sub"] as? String == "alice@example.com")
        let audience = claims["aud"] as? String ?? (claims["aud"] as? [String])?.first
        #expect(audience == "https://as.example/token")
        #expect((claims["exp"] as? Double) == 1_800_000_300 && (claims["iat"] as? Double) == 1_800_000_000)
        #expect((claims["jti"] as? String)?.isEmpty == false)
        let fractional = try await ring.assertion(issuer: "i", subject: "s", audience: "a", now: now.addingTimeInterval(0.75))
        let fractionalClaims = try object(fractional.split(separator: ".").map(String.init)[1])
        #expect(fractionalClaims["nbf"] as? Double == 1_800_000_000, "nbf is not whole seconds")
        let other = try await ring.assertion(issuer: "i", subject: "s", audience: "a", now: now)
        #expect(other != jwt, "two assertions share a jti")
    }

    /// An EC key file with its certificate is a ring entry whose certificate the metadata lists.
    @Test func anECKeyWithItsCertificateIsPublishedInTheMetadata() throws {
        let keys = try TestSigningKeys.generate()
        defer { keys.remove() }
        let ring = try ParleySigningKeys.parse("e:\(keys.ecKeyWithCertificatePath)") { FileManager.default.contents(atPath: $0).map { Array($0) } }
        #expect(ring.entries.first?.algorithm == .es256 && ring.entries.first?.certificateDER != nil)
        #expect(ring.samlMetadata(entityID: "https://parley.example")?.contains("<ds:X509Certificate>") == true)
    }
}
