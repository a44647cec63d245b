import AuthFlows
import Testing

/// The destinations file's `identityProviders`, and the identity blocks of a destination.
@Suite struct IdentityProvidersDocumentTests {
    @Test func providersAndIdentityBlocksReadWithTheirDefaults() throws {
        let checked = try DestinationsDocument.readContents(
            """
            identityProviders:
              - { issuer: "https://idp.example", jwksUri: "https://idp.example/keys", audiences: [parley] }
              - { issuer: "https://login.example/t", jwksUri: "http://127.0.0.1:9/jwks", audiences: [a, b], userClaim: email }
            destinations:
              - { name: a, url: "https://a.example", registration: { identity: required }, identity: { match: email, providers: ["https://idp.example"] } }
              - { name: b, url: "https://b.example", registration: { policy: approval, identity: optional } }
              - { name: c, url: "https://c.example" }
            """)
        #expect(
            checked.identityProviders == [
                IdentityProvider(issuer: "https://idp.example", jwksURI: "https://idp.example/keys", audiences: ["parley"], userClaim: "sub"),
                IdentityProvider(issuer: "https://login.example/t", jwksURI: "http://127.0.0.1:9/jwks", audiences: ["a", "b"], userClaim: "email"),
            ])
        #expect(checked.destinations.map(\.identityRequired) == [true, false, false])
        #expect(checked.destinations.map(\.identityMatchClaim) == ["email", "sub", "sub"])
        #expect(checked.destinations[1].registrationPolicy == .approval)
        // A file without identity providers reads as before.
        #expect(try DestinationsDocument.readContents("destinations: [{ name: a, url: \"https://a.example\" }]").identityProviders.isEmpty)
    }

    @Test func everyProblemIsReportedAtOnce() {
        let text = """
            identityProviders:
              - { issuer: "", jwksUri: "https://idp.example/keys", audiences: [parley] }
              - { issuer: "https://x.example", jwksUri: "ftp://x.example/keys", audiences: [] }
              - { issuer: "https://y.example", jwksUri: "https://y.example/k#frag", audiences: [""], userClaim: "" }
              - { issuer: "https://z.example", jwksUri: "https://z.example/keys", audiences: [p] }
              - { issuer: "https://z.example", jwksUri: "https://z.example/other", audiences: [q] }
            destinations:
              - { name: a, url: "https://a.example", registration: { identity: always }, identity: { match: "" } }
            """
        #expect {
            try DestinationsDocument.readContents(text)
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == [
                "destination 'a': the file lists 3 identity providers, so a destination that uses identity must say whose users it takes (identity: {providers: [<issuer>, …]}); two providers' users with the same name are not the same person",
                "destination 'a': registration.identity must be optional or required, got 'always'",
                "destination 'a': identity.match must be a claim name of 1 to 200 bytes",
                "identityProviders[0]: issuer must not be empty",
                "identity provider 'https://x.example': jwksUri must be an absolute http(s) URL without user info, fragment, spaces or control characters",
                "identity provider 'https://x.example': audiences must name at least one audience",
                "identity provider 'https://y.example': jwksUri must be an absolute http(s) URL without user info, fragment, spaces or control characters",
                "identity provider 'https://y.example': audiences must not contain an empty string",
                "identity provider 'https://y.example': userClaim must be a claim name of 1 to 200 bytes",
                "identity provider 'https://z.example' is listed twice",
            ]
        }
    }

    @Test func requiredIdentityNeedsAProvider() {
        #expect {
            try DestinationsDocument.read("destinations: [{ name: a, url: \"https://a.example\", registration: { identity: required } }]")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == [
                "destination 'a': registration.identity is required, but the file lists no identityProviders"
            ]
        }
    }

    @Test func aProviderWithoutItsFieldsSaysWhere() {
        #expect {
            try DestinationsDocument.decodeContents("identityProviders: [{ issuer: x }]\ndestinations: []\n", source: "d.yaml")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == ["d.yaml: missing 'jwksUri' at .identityProviders[0]"]
        }
    }
}
