import AuthFlows
import Foundation
import ParleyDomain
import Testing

/// The signature, the body and the configuration, on their own.
@Suite struct WebhookSignatureTests {
    /// The Standard Webhooks specification's own example (secret, id, timestamp, body → signature).
    @Test func theSpecificationsExampleSignsAsPublished() throws {
        let secret = try #require(WebhookSignature.secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        let signature = WebhookSignature.signature(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8), secrets: [secret])
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        // Both readings of a secret the reference libraries accept: with `whsec_`, and without it
        // (then also base64, as standardwebhooks decodes it); text that is not base64 is refused.
        #expect(WebhookSignature.secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == secret)
        #expect(WebhookSignature.secret("a-plain-text-secret-of-32-bytes!") == nil)
    }

    @Test func shortOrMissingSecretsAndUnknownEventsAreStartUpProblems() {
        let subscriptions = [
            WebhookSubscription(url: "https://a.example/hook", secretRef: "env:A", events: nil, destination: nil),
            WebhookSubscription(url: "https://b.example/hook", secretRef: "env:SHORT", events: nil, destination: nil),
            WebhookSubscription(url: "https://c.example/hook", secretRef: "env:UNSET", events: nil, destination: nil),
            WebhookSubscription(url: "https://a.example/hook", secretRef: "env:OTHER", events: [.revoked], destination: "x"),
        ]
        let (endpoints, problems) = WebhookEndpoint.resolve(
            subscriptions, environment: ["A": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "SHORT": "tooshort", "OTHER": "x"])
        #expect(endpoints.isEmpty, "no endpoint with a problem")
        #expect(problems.count == 3, "\(problems)")
        #expect(problems.contains { $0.contains("a.example") && $0.contains("different secretRef") })
        #expect(problems.contains { $0.contains("b.example") && $0.contains("24 bytes") })
        #expect(problems.contains { $0.contains("c.example") && $0.contains("names nothing") })
        #expect(!problems.joined().contains("tooshort"), "a secret is never echoed")
    }

    @Test func aSubscriptionCoversItsDestinationAndEvents() throws {
        let (endpoints, problems) = WebhookEndpoint.resolve(
            [
                WebhookSubscription(url: "https://all.example/hook", secretRef: "file:/s", events: nil, destination: nil),
                WebhookSubscription(url: "https://x.example/hook", secretRef: "file:/s", events: [.revoked, .recovered], destination: "x"),
            ], environment: [:], readFile: { _ in "YW5vdGhlci1zZWNyZXQtb2YtMjQtYnl0ZXMhIQ==\n" })
        #expect(problems.isEmpty)
        let all = try #require(endpoints.first { $0.url == "https://all.example/hook" })
        let x = try #require(endpoints.first { $0.url == "https://x.example/hook" })
        #expect(all.covers(type: "flow.completed", destination: "y"))
        #expect(x.covers(type: "registration.revoked", destination: "x"))
        #expect(!x.covers(type: "registration.revoked", destination: "y"))
        #expect(!x.covers(type: "flow.completed", destination: "x"))
        #expect(!all.covers(type: "not.an.event", destination: nil))
        #expect(WebhookEndpoint.display("https://h.example/in?token=s3cret") == "https://h.example/in?…")
        #expect(WebhookEndpoint.display("https://h.example/in") == "https://h.example/in")
    }

    @Test func theDestinationsFileChecksItsWebhooks() throws {
        let text = """
            webhooks:
              - { url: "http://hooks.example/in", secretRef: "env:H" }
              - { url: "https://hooks.example/in", secretRef: "vault:x", events: [flow.completed, flow.exploded] }
            destinations:
              - name: d
                url: https://d.example
                webhooks:
                  - { url: "http://127.0.0.1:9/in", secretRef: "file:/run/secrets/hook", events: [] }
            """
        #expect(throws: DestinationSpec.Invalid.self) { try DestinationsDocument.readContents(text) }
        do {
            _ = try DestinationsDocument.readContents(text)
        } catch {
            let problems = error.problems.joined(separator: "\n")
            #expect(problems.contains("webhooks[0].url must be https"), "\(problems)")
            #expect(problems.contains("webhooks[1].secretRef must be env:NAME or file:/absolute/path"))
            #expect(problems.contains("unknown event 'flow.exploded'"))
            #expect(problems.contains("destination 'd': webhooks[0].events must name at least one event"))
        }
        let good = try DestinationsDocument.readContents(
            """
            webhooks: [{ url: "https://hooks.example/in", secretRef: "env:H" }]
            destinations:
              - { name: d, url: "https://d.example", webhooks: [{ url: "http://127.0.0.1:9/in", secretRef: "env:H", events: [registration.revoked] }] }
            """)
        #expect(good.webhooks.count == 1 && good.webhooks[0].destination == nil)
        #expect(good.allWebhooks.count == 2 && good.allWebhooks[1].destination == "d" && good.allWebhooks[1].events == [.revoked])
    }

    @Test func theBodyIsTheContractsShape() throws {
        let event = StoredLifecycleEvent(
            id: UUID(), seq: 1, type: "registration.recovered", at: Date(timeIntervalSince1970: 1_800_000_000), registrationID: UUID(),
            destination: "as", user: EventUser(issuer: "https://idp", subject: "alice", verified: true), detail: ["flowId": "f"])
        let body = try #require(try JSONSerialization.jsonObject(with: Data(WebhookBody.encode(event))) as? [String: Any])
        #expect(Set(body.keys) == ["id", "type", "at", "registrationId", "destination", "user", "detail"])
        #expect(body["at"] as? String == "2027-01-15T08:00:00Z")
        #expect((body["user"] as? [String: Any])?["verified"] as? Bool == true)
        let anonymous = StoredLifecycleEvent(
            id: UUID(), seq: 2, type: "token.refresh_failed", at: Date(), registrationID: nil, destination: "cc", user: nil, detail: [:])
        let second = try #require(try JSONSerialization.jsonObject(with: Data(WebhookBody.encode(anonymous))) as? [String: Any])
        #expect(second["user"] is NSNull && second["registrationId"] is NSNull)
    }
}
