import AuthFlows
import Testing

/// `registration: {implicit: true, scopes}`: agents' registrations, made on first use. What a
/// destinations file may ask for, and every refusal named at start.
@Suite struct ImplicitRegistrationDocumentTests {
    @Test func anImplicitDestinationTakesScopesAndAPropagationGrant() throws {
        let text = IdentityRequirementDocumentTests.providers + """

            destinations:
              - name: a
                url: https://a.example
                registration: { implicit: true, scopes: [orders.read, "orders:write"] }
              - name: x
                url: https://x.example
                registration: { implicit: true, identity: required }
                oauth2: { grant: token_exchange, tokenEndpoint: "https://as.example/token", clientId: c, clientSecret: s, subjectTokenType: access_token }
            """
        let read = try DestinationsDocument.read(text)
        #expect(read.map(\.implicitRegistrations) == [true, true])
        #expect(read.first?.agentScopes == ["orders.read", "orders:write"])
    }

    @Test func whatAnImplicitRegistrationCannotDoIsAStartUpError() {
        let text = IdentityRequirementDocumentTests.providers + """

            destinations:
              - name: approve
                url: https://a.example
                registration: { implicit: true, policy: approval }
              - name: smp
                url: https://s.example
                smp: { appId: app }
                registration: { implicit: true }
              - name: scoped
                url: https://c.example
                registration: { scopes: [read] }
              - name: badscope
                url: https://b.example
                registration: { implicit: true, scopes: ["two words", ""] }
            """
        #expect {
            try DestinationsDocument.read(text)
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == [
                "destination 'approve': registration.implicit registrations are created on first use, so registration.policy must be open",
                "destination 'smp': registration.implicit registrations are created on first use, with no SMP registration upstream, so smp cannot be set",
                "destination 'scoped': registration.scopes is what an agent's access token must carry, so it needs registration.implicit: true",
                "destination 'badscope': registration.scopes must be OAuth scope tokens of 1 to 200 bytes (printable ASCII without spaces, '\"' or '\\')",
                "destination 'badscope': registration.scopes must be OAuth scope tokens of 1 to 200 bytes (printable ASCII without spaces, '\"' or '\\')",
            ]
        }
    }

    @Test func implicitRegistrationsNeedAnIdentityProvider() {
        #expect {
            try DestinationsDocument.read("destinations:\n  - { name: a, url: https://a.example, registration: { implicit: true } }\n")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems
                == ["destination 'a': registration.implicit takes agents' access tokens, but the file lists no identityProviders to issue them"]
        }
    }
}
