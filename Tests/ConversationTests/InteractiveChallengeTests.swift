import AuthFlows
@testable import Conversation
import ParleyTesting
import Testing

/// SAML2, OTP and Basic-form challenge detection, and URL resolution for `Location`s.
@Suite struct InteractiveChallengeTests {
    static let saml2 = try! DestinationSpec(name: "d", url: "https://sp.example/sp").with { $0.saml2 = .init(); $0.otp = .init() }.validated()

    @Test func locationsResolveAgainstTheRequest() {
        let base = "https://sp.example/sp/a/b?x=1"
        #expect(URLParts.resolve("https://idp.example/sso?q", against: base) == "https://idp.example/sso?q")
        #expect(URLParts.resolve("//idp.example/sso", against: base) == "https://idp.example/sso")
        #expect(URLParts.resolve("/sp/otp", against: base) == "https://sp.example/sp/otp")
        #expect(URLParts.resolve("?y=2", against: base) == "https://sp.example/sp/a/b?y=2")
        #expect(URLParts.resolve("c", against: base) == "https://sp.example/sp/a/c")
        #expect(URLParts.resolve("javascript:alert(1)", against: base) == "https://sp.example/sp/a/javascript:alert(1)")
        #expect(URLParts.resolve("ftp://x/y", against: base) == nil)
        #expect(URLParts.resolve("/a\r\nSet-Cookie: x", against: base) == nil)
        #expect(URLParts.resolve("/a b", against: base) == nil)
    }

    @Test func saml2ChallengeIsSeenInEachOfItsThreeForms() async throws {
        let filter = SAML2ChallengeFilter(settings: try #require(Self.saml2.saml2))
        let request = UpstreamRequest(method: "GET", url: "https://sp.example/sp/api")
        let conversation = Conversation(id: "c", manager: ConversationManager(transport: FakeTransport { _ in .text(200) }))
        let challenges: [UpstreamResponse] = [
            .text(200, "{}", headers: ["com.sap.cloud.security.login": "login-request", "Content-Type": "application/json"]),
            .text(302, headers: ["Location": "https://idp.example/sso?SAMLRequest=abc&RelayState=x"]),
            .text(200, "<html><body><FORM method='post'><input type=\"hidden\" name=\"SAMLRequest\" value=\"x\"/></form>",
                headers: ["Content-Type": "text/html; charset=utf-8"]),
        ]
        for var response in challenges {
            guard case .interactionRequired(let interaction) = try await filter.inspect(&response, request: request, conversation: conversation)
            else {
                Issue.record("not seen as a SAML2 challenge: \(response.status)")
                continue
            }
            #expect(interaction.kind == .saml2)
            #expect(interaction.url == request.url)
        }
        let ordinary: [UpstreamResponse] = [
            .text(200, "<form><input name=\"user\"></form>", headers: ["Content-Type": "text/html"]),
            .text(302, headers: ["Location": "https://sp.example/sp/next?SAMLRequestX=1"]),
            .text(200, "SAMLRequest", headers: ["Content-Type": "application/json"]),
        ]
        for var response in ordinary {
            guard case .deliver = try await filter.inspect(&response, request: request, conversation: conversation) else {
                Issue.record("an ordinary response was taken for a SAML2 challenge")
                continue
            }
        }
        // The HTML looked into is delivered whole.
        var page = UpstreamResponse.text(200, "<p>hello</p>", headers: ["Content-Type": "text/html"])
        _ = try await filter.inspect(&page, request: request, conversation: conversation)
        #expect(String(decoding: try await page.body.collect(upTo: 100), as: UTF8.self) == "<p>hello</p>")
    }

    @Test func otpChallengeOpensTheFormWithTheAdditionalParametersAndFinishesAtTheFinishParameters() throws {
        let detector = OTPDetector(settings: try #require(Self.saml2.otp))
        let challenge = UpstreamResponse.text(302, headers: ["Location": "/sp/otp", "X-SMP-Authentication": "OTP-Challenge"])
        let location = try #require(detector.challengeLocation(challenge, requestURL: "https://sp.example/sp/api"))
        #expect(location == "https://sp.example/sp/otp")
        #expect(detector.formURL(location) == "https://sp.example/sp/otp?redirecttooriginalurl=false")
        #expect(detector.formURL("https://sp.example/sp/otp?redirecttooriginalurl=true") == "https://sp.example/sp/otp?redirecttooriginalurl=true")
        #expect(detector.challengeLocation(.text(200, headers: ["x-smp-authentication": "otp-challenge"]), requestURL: location) == nil)
        #expect(detector.challengeLocation(.text(302, headers: ["Location": "/x"]), requestURL: location) == nil)
        #expect(detector.isFinish("https://sp.example/sp/otp/finished?a=1&finished=true"))
        #expect(!detector.isFinish("https://sp.example/sp/otp/finished?finished=truex"))
        #expect(!detector.isFinish("https://sp.example/sp/otp"))
    }

    @Test func basicFormAsksForAPersonOnlyForBasic() async throws {
        let filter = BasicFormChallengeFilter()
        let conversation = Conversation(id: "c", manager: ConversationManager(transport: FakeTransport { _ in .text(200) }))
        let request = UpstreamRequest(method: "GET", url: "https://form.example/api")
        func challenge(_ method: ProtectionSpace.Method) -> Challenge {
            Challenge(
                protectionSpace: ProtectionSpace(method: method, realm: nil, origin: "https://form.example"), previousFailureCount: 1,
                request: request, status: 401, headers: [:])
        }
        guard case .interactionRequired(let interaction) = try await filter.handle(challenge(.basic), conversation: conversation) else {
            Issue.record("a Basic challenge did not ask for the form")
            return
        }
        #expect(interaction.kind == .basic && interaction.url == request.url)
        guard case .notHandled = try await filter.handle(challenge(.bearer), conversation: conversation) else {
            Issue.record("a Bearer challenge asked for the Basic form")
            return
        }
    }
}

extension DestinationSpec {
    func with(_ change: (inout DestinationSpec) -> Void) -> DestinationSpec {
        var copy = self
        change(&copy)
        return copy
    }
}
