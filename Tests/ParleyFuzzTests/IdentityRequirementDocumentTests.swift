import AuthFlows
import Testing

/// A destination that requires a known user must have sign-ins that can name one: saml2 needs
/// the IdP's certificates, an authorization-code oauth2 block an `id_token` key set or userinfo.
@Suite struct IdentityRequirementDocumentTests {
    static let providers = """
        identityProviders:
          - { issuer: "https://idp.example", jwksUri: "https://idp.example/jwks", audiences: [parley] }
        """

    @Test func signInsThatNameNobodyCannotBeRequired() {
        let text = Self.providers + """

            destinations:
              - name: s
                url: https://s.example
                saml2: {}
                registration: { identity: required }
              - name: o
                url: https://o.example
                registration: { identity: required }
                oauth2: { authorizationEndpoint: "https://as.example/authorize", tokenEndpoint: "https://as.example/token", clientId: c }
            """
        #expect {
            try DestinationsDocument.read(text)
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == [
                "destination 's': registration.identity is required, but saml2 sign-ins name nobody without saml2.idpCertificates",
                "destination 'o': registration.identity is required, but oauth2 sign-ins name nobody without oauth2.jwksUri or oauth2.userinfoEndpoint",
            ]
        }
    }

    @Test func signInsThatNameSomebodyMayBeRequired() throws {
        let text = Self.providers + """

            destinations:
              - name: o
                url: https://o.example
                registration: { identity: required }
                oauth2:
                  authorizationEndpoint: "https://as.example/authorize"
                  tokenEndpoint: "https://as.example/token"
                  clientId: c
                  userinfoEndpoint: "https://as.example/userinfo"
              - name: b
                url: https://b.example
                basic: { form: true }
                registration: { identity: required }
              - name: cc
                url: https://cc.example
                registration: { identity: required, policy: approval }
                oauth2: { grant: client_credentials, tokenEndpoint: "https://as.example/token", clientId: c, clientSecret: s }
            """
        #expect(try DestinationsDocument.read(text).allSatisfy(\.identityRequired))
    }
}
