import AuthFlows
import Testing

/// A destination's OpenID Connect settings (`oauth2.issuer`, `jwksUri`, `userinfoEndpoint`):
/// checked at start with every problem at once, and `openid` requested when they are used.
@Suite struct OpenIDSettingsTests {
    static func spec(
        grant: String = "authorization_code", scopes: [String]? = ["read"], issuer: String? = nil, jwksUri: String? = nil,
        userinfoEndpoint: String? = nil
    ) -> DestinationSpec {
        var spec = DestinationSpec(name: "as", url: "https://api.example")
        spec.oauth2 = .init(
            grant: grant, authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example:8443/token",
            revocationEndpoint: nil, clientId: "parley", clientSecret: "s", clientAuthentication: nil, scopes: scopes, scopeKeys: nil,
            challenge: nil, issuer: issuer, jwksUri: jwksUri, userinfoEndpoint: userinfoEndpoint)
        return spec
    }

    @Test func withoutThemNothingChanges() throws {
        let settings = try #require(try Self.spec().validated().oauth2)
        #expect(settings.scopes == ["read"])
        #expect(settings.jwksURI == nil && settings.userinfoEndpoint == nil && settings.issuer == nil)
        #expect(!settings.yieldsIdentity)
    }

    @Test func openidIsRequestedWhenTheDestinationReadsWhoSignedIn() throws {
        let viaKeys = try #require(
            try Self.spec(issuer: "https://as.example", jwksUri: "https://as.example/jwks").validated().oauth2)
        #expect(viaKeys.scopes == ["openid", "read"])
        #expect(viaKeys.yieldsIdentity)
        #expect(viaKeys.identityIssuer == "https://as.example")
        let viaUserinfo = try #require(try Self.spec(scopes: nil, userinfoEndpoint: "https://as.example/userinfo").validated().oauth2)
        #expect(viaUserinfo.scopes == ["openid"])
        #expect(viaUserinfo.yieldsIdentity)
        // Without an issuer, the identities are vouched for by the token endpoint's origin.
        #expect(viaUserinfo.identityIssuer == "https://as.example:8443")
        // Listed already: not twice, and where the file put it.
        let listed = try #require(
            try Self.spec(scopes: ["read", "openid"], userinfoEndpoint: "https://as.example/userinfo").validated().oauth2)
        #expect(listed.scopes == ["read", "openid"])
    }

    @Test func everyProblemIsReportedAtOnce() throws {
        let error = try #require(throws: DestinationSpec.Invalid.self) {
            try Self.spec(jwksUri: "/jwks", userinfoEndpoint: "ftp://as.example/userinfo").validated()
        }
        for expected in [
            "oauth2.issuer is required", "oauth2.jwksUri must be an absolute http(s) URL",
            "oauth2.userinfoEndpoint must be an absolute http(s) URL",
        ] {
            #expect(error.problems.contains { $0.contains(expected) }, "\(expected): \(error.problems)")
        }
        let issuer = try #require(throws: DestinationSpec.Invalid.self) {
            try Self.spec(issuer: "as.example", jwksUri: "https://as.example/jwks").validated()
        }
        #expect(issuer.problems == ["destination 'as': oauth2.issuer must be an absolute http(s) URL"])
        // Only a person's sign-in has an identity to read.
        let grant = try #require(throws: DestinationSpec.Invalid.self) {
            try Self.spec(grant: "client_credentials", userinfoEndpoint: "https://as.example/userinfo").validated()
        }
        #expect(grant.problems.count == 1)
        #expect(grant.problems.first?.contains("only the authorization_code grant reads") == true)
    }

    @Test func theDestinationsFileNamesThem() throws {
        let destinations = try DestinationsDocument.read(
            """
            destinations:
              - name: as
                url: https://api.example
                oauth2:
                  authorizationEndpoint: https://as.example/authorize
                  tokenEndpoint: https://as.example/token
                  clientId: parley
                  issuer: https://as.example
                  jwksUri: https://as.example/jwks
                  userinfoEndpoint: https://as.example/userinfo
            """)
        let settings = try #require(destinations.first?.oauth2)
        #expect(settings.issuer == "https://as.example")
        #expect(settings.jwksURI == "https://as.example/jwks")
        #expect(settings.userinfoEndpoint == "https://as.example/userinfo")
        #expect(settings.scopes == ["openid"])
    }
}
