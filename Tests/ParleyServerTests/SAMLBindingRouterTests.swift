import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyEncoding
import ParleyTesting
import Testing

/// Who signed in through SAML2, judged at the web path with a response SimpleSAMLphp really
/// signed (Tests/Fixtures/saml/captured: alice, and the IdP's certificate): a verified response
/// binds a registration without a user when the flow completes; one whose signature does not
/// verify never sets a user, and ends the flow of a registration that has one.
@Suite struct SAMLBindingRouterTests {
    static let captured = packageRoot + "/Tests/Fixtures/saml/captured/"

    static func configuration() throws -> ParleyConfiguration {
        var sp = DestinationSpec(name: "sp", url: "https://sp.example/sp")
        sp.saml2 = .init()
        sp.saml2?.idpCertificates = [try String(contentsOfFile: captured + "simplesamlphp-idp.pem", encoding: .utf8)]
        return ParleyConfiguration(
            server: .init(publicURL: "https://parley.example"), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [try sp.validated()])
    }

    /// The captured response, and the same with its NameID changed after signing.
    static func responses() throws -> (signed: String, tampered: String) {
        let signed = try String(contentsOfFile: captured + "simplesamlphp-response.b64", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let xml = String(decoding: Base64.decode(signed) ?? [], as: UTF8.self)
        #expect(xml.contains(">alice<"))
        return (signed, Base64.encode(Array(xml.replacingOccurrences(of: ">alice<", with: ">bob<").utf8)))
    }

    struct World {
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        let upstream = HostedFlowRouterTests.FakeUpstream()

        func run(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
            var dependencies = ParleyDependencies.inMemory(
                transport: FakeTransport { [upstream] in upstream.answer($0) }, registrations: registrations)
            dependencies.flows = flows
            let router = try compose(configuration: try SAMLBindingRouterTests.configuration(), dependencies: dependencies, metrics: Metrics(), logger: quietLogger)
                .router
            try await Application(router: router).test(.router) { try await body($0) }
        }

        /// A saml2 flow of the registration, its browser bound (through the confirmation page).
        func browser(_ client: any TestClientProtocol, token: String) async throws -> (id: String, cookies: HTTPFields) {
            let flow = try await client.execute(
                uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                body: ByteBuffer(string: "{\"kind\":\"saml2\"}")
            ) { RouterTests.json($0.body) }
            let id = flow["id"] as? String ?? ""
            let start = String((flow["url"] as? String ?? "").dropFirst("https://parley.example".count))
            let binding = try await FlowConfirmationRouterTests.confirm(client, start) { HostedFlowRouterTests.cookie($0) }
            #expect(!binding.isEmpty, "the confirmed flow binds the browser")
            return (id, [.cookie: binding])
        }

        /// The ACS post through the web path; how many requests reached the SP's ACS so far.
        func post(_ client: any TestClientProtocol, _ browser: HTTPFields, samlResponse: String) async throws -> TestResponse {
            let body = PercentEncoding.encodeForm([("SAMLResponse", samlResponse), ("RelayState", "x")])
            var headers = browser
            headers[.contentType] = "application/x-www-form-urlencoded"
            return try await client.execute(uri: "/web/sp/acs", method: .post, headers: headers, body: ByteBuffer(string: body))
        }

        var acsPosts: Int { upstream.seen.withLock { $0.filter { $0.url.hasSuffix("/sp/acs") }.count } }
    }

    @Test func aVerifiedSAMLSignInBindsAndAnUnverifiableOneNeverDoes() async throws {
        let (signed, tampered) = try Self.responses()
        let world = World()
        try await world.run { client in
            let token = try await HostedFlowRouterTests.register(client, "sp")

            // Tampered after signing: forwarded (the SP judges it), but it sets no user.
            let first = try await world.browser(client, token: token)
            _ = try await world.post(client, first.cookies, samlResponse: tampered)
            #expect(world.acsPosts == 1)
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: first.cookies) {
                #expect($0.status == .seeOther)
            }
            #expect(world.flows.all.first { $0.idString == first.id }?.status == .completed)
            #expect(world.registrations.all.first?.user == nil, "an unverifiable SAML response never sets a user")

            // Signed by the IdP: the completed flow binds the registration to alice.
            let second = try await world.browser(client, token: token)
            _ = try await world.post(client, second.cookies, samlResponse: signed)
            try await client.execute(uri: "/web/sp/SAMLAuthLauncher?finishEndpointParam=done", method: .get, headers: second.cookies) {
                #expect($0.status == .seeOther)
            }
            let user = try #require(world.registrations.all.first?.user)
            #expect(user.subject == "alice")
            #expect(user.verified == false)
            #expect(user.issuer.contains("/saml2/idp/metadata.php"), "\(user.issuer)")

            // Now that it has a user, an unverifiable response ends the flow before the SP sees it.
            let third = try await world.browser(client, token: token)
            let posts = world.acsPosts
            let ended = try await world.post(client, third.cookies, samlResponse: tampered)
            #expect(ended.status == .seeOther)
            #expect(ended.headers[.location] == "https://parley.example/flows/\(third.id)/done")
            #expect(world.acsPosts == posts, "the SP never saw it")
            let failed = try #require(world.flows.all.first { $0.idString == third.id })
            #expect(failed.status == .failed)
            #expect(failed.error == "identity_unverified")
        }
    }
}
