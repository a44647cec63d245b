import AuthFlows
import Testing

/// An identity is the pair (issuer, subject): with several identity providers listed, each
/// destination that uses identity names whose users it takes; the safe setting is the default;
/// and a step-up rule covers the operation, not one spelling of it.
@Suite struct IdentityPairDocumentTests {
    static let providers = """
        identityProviders:
          - { issuer: "https://corp.example", jwksUri: "https://corp.example/keys", audiences: [parley] }
          - { issuer: "https://partner.example", jwksUri: "https://partner.example/keys", audiences: [parley] }
        """

    static func problems(_ text: String) -> [String] {
        do {
            _ = try DestinationsDocument.readContents(text)
            return []
        } catch {
            return error.problems
        }
    }

    @Test func twoProvidersMeanEveryDestinationThatUsesIdentityNamesItsOwn() throws {
        let oauth = """
            oauth2: { grant: authorization_code, authorizationEndpoint: "https://corp.example/a", tokenEndpoint: "https://corp.example/t", clientId: c, issuer: "https://corp.example", jwksUri: "https://corp.example/keys" }
            """
        let without = Self.problems(Self.providers + "\ndestinations:\n  - { name: app, url: \"https://app.example\", \(oauth) }")
        #expect(without.count == 1 && without[0].contains("must say whose users it takes"), "\(without)")
        // Named, it reads, and takes that provider's users only.
        let checked = try DestinationsDocument.readContents(
            Self.providers + "\ndestinations:\n  - { name: app, url: \"https://app.example\", identity: { providers: [\"https://corp.example\"] }, \(oauth) }")
        let app = try #require(checked.destinations.first)
        #expect(app.identityRequired, "a sign-in destination requires verified users by default")
        #expect(app.acceptsIdentity(of: "https://corp.example") && !app.acceptsIdentity(of: "https://partner.example"))
        // A destination that takes no identity at all needs no list.
        #expect(Self.problems(Self.providers + "\ndestinations:\n  - { name: plain, url: \"https://p.example\", basic: {} }").isEmpty)
        // Only listed issuers may be named.
        let unknown = Self.problems(
            Self.providers + "\ndestinations:\n  - { name: app, url: \"https://app.example\", identity: { providers: [\"https://evil.example\"] }, basic: {} }")
        #expect(unknown.contains { $0.contains("names 'https://evil.example', which the file's identityProviders do not list") }, "\(unknown)")
    }

    @Test func aSignInThatNamesNoProviderCannotServeTwo() {
        let both = #"identity: { providers: ["https://corp.example", "https://partner.example"] }"#
        let saml = Self.problems(
            Self.providers + "\ndestinations:\n  - { name: sp, url: \"https://sp.example\", \(both), registration: { identity: optional }, saml2: {} }")
        #expect(saml.contains { $0.contains("a saml2 or Basic-form sign-in names a user without saying which provider's") }, "\(saml)")
        // Parley's own assertions carry the user's name alone: one provider per destination.
        let bearer = Self.problems(
            Self.providers + """

                destinations:
                  - name: bearer
                    url: "https://b.example"
                    \(both)
                    registration: { identity: required }
                    oauth2: { grant: saml2_bearer, tokenEndpoint: "https://as.example/t", clientId: c, samlAudience: "https://as.example" }
                """)
        #expect(bearer.contains { $0.contains("may take the users of one identity provider") }, "\(bearer)")
    }

    @Test func withAProviderListedASignInDestinationRequiresVerifiedUsersUnlessItSaysOtherwise() throws {
        let one = """
            identityProviders:
              - { issuer: "https://corp.example", jwksUri: "https://corp.example/keys", audiences: [parley] }
            destinations:
              - { name: form, url: "https://f.example", basic: { form: true } }
              - { name: otp, url: "https://o.example", basic: {}, otp: {} }
              - { name: written, url: "https://w.example", basic: { form: true }, registration: { identity: optional } }
              - { name: api, url: "https://a.example", basic: {} }
            """
        let checked = try DestinationsDocument.readContents(one)
        #expect(checked.destinations.map(\.identityRequired) == [true, true, false, false])
        #expect(checked.destinations.map(\.identityOptionalWithSignIn) == [false, false, true, false])
        // Without a provider nothing changes: there is nobody to verify users with.
        let none = try DestinationsDocument.read("destinations: [{ name: form, url: \"https://f.example\", basic: { form: true } }]")
        #expect(none.map(\.identityRequired) == [false] && none.map(\.identityOptionalWithSignIn) == [false])
        // The default holds a SAML destination to what required asks of it, and says how to opt out.
        let saml = Self.problems(
            "identityProviders: [{ issuer: \"https://corp.example\", jwksUri: \"https://corp.example/k\", audiences: [p] }]\ndestinations: [{ name: sp, url: \"https://sp.example\", saml2: {} }]")
        #expect(saml.count == 1 && saml[0].contains("write registration: {identity: optional}"), "\(saml)")
    }

    @Test func aStepUpRuleCoversEverySpellingOfItsOperation() throws {
        let rule = StepUpRule(methods: ["POST"], pathPrefix: "/api/pay", maxAge: .seconds(300))
        for path in [
            "/api/pay", "/API/Pay", "/api;v=1/pay", "/api/pay;jsessionid=x", "/api/p%61y", "/api/pay/7?x=1", "/api(bD1lbg==)/pay",
        ] {
            #expect(rule.covers(method: "POST", path: path), "\(path)")
        }
        for path in ["/api/payroll", "/api/pa", "/apix/pay"] { #expect(!rule.covers(method: "POST", path: path), "\(path)") }
        #expect(!rule.covers(method: "GET", path: "/api/pay"))

        let odata = StepUpRule(methods: ["POST"], pathPrefix: "/sap/opu/odata/sap/ZPAY_SRV/Payments", maxAge: .seconds(60))
        for path in [
            "/sap/opu/odata/sap/ZPAY_SRV/Payments", "/sap(bD1lbg==)/opu/odata/sap/ZPAY_SRV/Payments",
            "/sap/opu/odata/sap/ZPAY_SRV;o=SYS/Payments", "/sap/opu/odata/sap/zpay_srv/payments('1')",
        ] {
            #expect(odata.covers(method: "POST", path: path), "\(path)")
        }
        // A batch carries any operation of its service: covered whatever the rule's methods.
        #expect(odata.covers(method: "POST", path: "/sap/opu/odata/sap/ZPAY_SRV/$batch"))
        #expect(odata.covers(method: "POST", path: "/sap/opu/odata/sap/ZPAY_SRV;o=SYS/%24batch"))
        #expect(!odata.covers(method: "POST", path: "/sap/opu/odata/sap/ZOTHER_SRV/$batch"))
        #expect(!odata.covers(method: "GET", path: "/sap/opu/odata/sap/ZPAY_SRV/$batch"))
        #expect(StepUpRule.canonicalPath("/sap(bD1lbg==)/opu;x=1/odata?$top=1") == "/sap/opu/odata")
    }
}
