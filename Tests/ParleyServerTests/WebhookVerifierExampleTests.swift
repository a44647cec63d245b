import Foundation
import Testing

import ParleyDomain
@testable import ParleyServer

// The Swift example of docs/api.md ("Events and webhooks"), exactly as printed there (a test below
// checks that the page still shows this text), so the example is compiled and run.

// docs-example-begin
import Crypto  // swift-crypto; CryptoKit on Apple platforms
import Foundation

/// True when `signatures` (the webhook-signature header) holds a v1 signature of `id.timestamp.body`
/// made with `secret` (`whsec_…`), and the timestamp is within five minutes of now.
func isFromParley(id: String, timestamp: String, signatures: String, body: Data, secret: String) -> Bool {
    guard let seconds = TimeInterval(timestamp), abs(Date().timeIntervalSince1970 - seconds) < 300,
          let key = Data(base64Encoded: secret.hasPrefix("whsec_") ? String(secret.dropFirst(6)) : secret)
    else { return false }
    let signed = Data("\(id).\(timestamp).".utf8) + body
    return signatures.split(separator: " ").contains { value in
        guard value.hasPrefix("v1,"), let sent = Data(base64Encoded: String(value.dropFirst(3))) else { return false }
        // isValidAuthenticationCode compares in constant time.
        return HMAC<SHA256>.isValidAuthenticationCode(sent, authenticating: signed, using: SymmetricKey(data: key))
    }
}
// docs-example-end

@Suite struct WebhookVerifierExampleTests {
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    @Test func theDocumentedVerifierAcceptsParleysSignatureAndNothingElse() throws {
        let event = StoredLifecycleEvent(
            id: UUID(), seq: 1, type: "flow.completed", at: Date(), registrationID: UUID(), destination: "d", user: nil, detail: ["flowId": "f"])
        let body = WebhookBody.encode(event)
        let id = event.id.uuidString.lowercased()
        let now = String(Int64(Date().timeIntervalSince1970))
        let other = try #require(WebhookSignature.secret("whsec_c2VjcmV0LW9mLWxhc3QteWVhci0wMTIzNDU2Nzg5"))
        let key = try #require(WebhookSignature.secret(Self.secret))
        let both = WebhookSignature.signature(id: id, timestamp: Int64(now) ?? 0, body: body, secrets: [other, key])
        #expect(isFromParley(id: id, timestamp: now, signatures: both, body: Data(body), secret: Self.secret))
        let onlyOther = WebhookSignature.signature(id: id, timestamp: Int64(now) ?? 0, body: body, secrets: [other])
        #expect(!isFromParley(id: id, timestamp: now, signatures: onlyOther, body: Data(body), secret: Self.secret))
        #expect(!isFromParley(id: id, timestamp: now, signatures: both, body: Data(body + [0x20]), secret: Self.secret), "another body")
        let old = String(Int64(Date().timeIntervalSince1970) - 600)
        let stale = WebhookSignature.signature(id: id, timestamp: Int64(old) ?? 0, body: body, secrets: [key])
        #expect(!isFromParley(id: id, timestamp: old, signatures: stale, body: Data(body), secret: Self.secret), "a replay")
    }

    @Test func theDocsShowThisExample() throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let begin = try #require(source.range(of: "// docs-example-begin\n"))
        let end = try #require(source.range(of: "// docs-example-end"))
        let example = String(source[begin.upperBound..<end.lowerBound])
        let page = try String(contentsOfFile: packageRoot + "/docs/api.md", encoding: .utf8)
        #expect(page.contains("```swift\n" + example + "```"), "docs/api.md shows the example as tested here")
    }
}
