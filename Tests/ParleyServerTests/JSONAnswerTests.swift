import AuthFlows
import Foundation
import ParleyDomain
@testable import ParleyServer
import Testing

/// The typed answers are written by `JSONValueEncoder` through `JSONValue.encoded()`; they
/// must be byte for byte what the hand-built `JSONValue`s of the rooms wrote before.
@Suite struct JSONAnswerTests {
    static func bytes(_ value: some Encodable) throws -> String {
        String(decoding: try JSONValueEncoder().encode(value).encoded(), as: UTF8.self)
    }

    static let created = Date(timeIntervalSince1970: 1_795_687_200.75)

    static func record(hint: String?) -> RegistrationRecord {
        RegistrationRecord(
            id: UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!, destination: "sim", status: .loginRequired, deviceType: "phone",
            deviceModel: nil, userHint: hint, returnUrl: nil, credentialsSealed: nil, clientCertificateSealed: nil, createdAt: created)
    }

    /// The registration object as `RegistrationService.view` built it.
    static func handBuilt(_ r: RegistrationRecord, appcid: String?, flow: JSONValue?, clientToken: String?) -> JSONValue {
        var object: [String: JSONValue] = [
            "id": .string(r.idString), "destination": .string(r.destination), "status": .string(r.status.rawValue),
            "appcid": .optional(appcid), "deviceType": .optional(r.deviceType), "deviceModel": .optional(r.deviceModel),
            "userHint": .optional(r.userHint), "createdAt": .string(RFC3339.format(r.createdAt)), "flow": flow ?? .null,
            "user": r.user.map { .object(["issuer": .string($0.issuer), "subject": .string($0.subject), "verified": .bool($0.verified)]) } ?? .null,
            "client": .optional(r.client),
        ]
        if let clientToken { object["clientToken"] = .string(clientToken) }
        return .object(object)
    }

    @Test func registrationObject() throws {
        // The flow object inside: every member present, `url` and `error` null when absent.
        let view = FlowView(
            id: "f", kind: "saml2", status: "pending", url: nil, expiresAt: Date(timeIntervalSince1970: 1_795_687_800), error: nil)
        let flow = JSONValue.object([
            "id": .string("f"), "kind": .string("saml2"), "status": .string("pending"), "url": .null,
            "expiresAt": .string(RFC3339.format(view.expiresAt)), "error": .null,
        ])
        for hint in [nil, "<alice> & \"bob\" / \\ é \u{7F}"] {
            let r = Self.record(hint: hint)
            #expect(
                try Self.bytes(RegistrationView(r, appcid: "APP-1", flow: view, clientToken: "pct_x"))
                    == String(decoding: Self.handBuilt(r, appcid: "APP-1", flow: flow, clientToken: "pct_x").encoded(), as: UTF8.self))
            #expect(
                try Self.bytes(RegistrationView(r, appcid: nil, flow: nil))
                    == String(decoding: Self.handBuilt(r, appcid: nil, flow: nil, clientToken: nil).encoded(), as: UTF8.self))
        }
        let text = try Self.bytes(RegistrationView(Self.record(hint: "a<b"), appcid: nil, flow: nil))
        #expect(text.contains(#""id":"6f9619ff-8b86-d011-b42d-00c04fc964ff""#))
        #expect(text.contains(#""createdAt":"2026-11-26T10:00:00Z""#))
        #expect(text.contains(#""appcid":null"#) && text.contains(#""deviceModel":null"#) && text.contains(#""flow":null"#))
        #expect(text.contains(#""userHint":"a\u003cb""#))
        #expect(text.contains(#""user":null"#))
        #expect(!text.contains("clientToken"))

        // A user: issuer, subject and verified; the value sign-ins are compared with stays inside.
        var withUser = Self.record(hint: nil)
        withUser.user = RegistrationUser(issuer: "https://idp.example", subject: "Alice", verified: true, match: "Alice@Example.com")
        #expect(
            try Self.bytes(RegistrationView(withUser, appcid: nil, flow: nil))
                == String(decoding: Self.handBuilt(withUser, appcid: nil, flow: nil, clientToken: nil).encoded(), as: UTF8.self))
        let userText = try Self.bytes(RegistrationView(withUser, appcid: nil, flow: nil))
        #expect(userText.contains(#""user":{"issuer":"https://idp.example","subject":"Alice","verified":true}"#))
        #expect(!userText.contains("alice@example.com") && !userText.contains("match"))
        #expect(withUser.user?.match == "alice@example.com" && withUser.user?.matchesName("ALICE@example.COM") == true
            && withUser.user?.matchesName("alice@example.\u{212A}om") == false)
        // Only ASCII letters fold: the Kelvin sign (U+212A) lower-cases to `k` in Unicode, never here.
        let kim = RegistrationUser(issuer: "https://idp.example", subject: "kim", verified: true, match: "kim")
        #expect(kim.matchesName("KIM") && !kim.matchesName("\u{212A}im") && !kim.matchesName("kİm"))

        // An agent's registration names its client; a thin client's says null.
        var agent = withUser
        agent.client = "assistant"
        #expect(
            try Self.bytes(RegistrationView(agent, appcid: nil, flow: nil))
                == String(decoding: Self.handBuilt(agent, appcid: nil, flow: nil, clientToken: nil).encoded(), as: UTF8.self))
        #expect(try Self.bytes(RegistrationView(agent, appcid: nil, flow: nil)).contains(#""client":"assistant""#))
        #expect(userText.contains(#""client":null"#))
    }

    @Test func adminAnswers() throws {
        let token = TokenMetadata(registrationID: nil, kind: "password", scopeKey: "https://as/", expiresAt: Self.created, lastUsedAt: nil)
        let admin = AdminRegistration(record: Self.record(hint: nil), flow: nil, tokens: [token])
        var expected = Self.handBuilt(admin.record, appcid: nil, flow: nil, clientToken: nil)
        if case .object(var members) = expected {
            members["tokens"] = .array([
                .object([
                    "kind": .string("password"), "scopeKey": .string("https://as/"), "expiresAt": .string("2026-11-26T10:00:00Z"),
                    "lastUsedAt": .null,
                ])
            ])
            expected = .object(members)
        }
        let view = AdminRegistrationView(admin)
        #expect(try Self.bytes(view) == String(decoding: expected.encoded(), as: UTF8.self))
        #expect(
            try Self.bytes(ListPage(items: [view], nextCursor: nil))
                == String(decoding: JSONValue.object(["items": .array([expected]), "nextCursor": .null]).encoded(), as: UTF8.self))

        #expect(try Self.bytes(RevocationView(RevocationOutcome(revoked: 3, upstream: nil))) == #"{"revoked":3,"upstream":null}"#)
        #expect(
            try Self.bytes(RevocationView(RevocationOutcome(revoked: 0, upstream: .init(attempted: 2, failed: 1))))
                == #"{"revoked":0,"upstream":{"attempted":2,"failed":1}}"#)

        let event = StoredAuditEvent(
            id: 7, at: Self.created,
            event: AuditEvent(action: "admin.revocation", actor: .admin, registrationID: nil, destination: "sim", detail: ["admin": "admin-1", "n": "2"]))
        #expect(
            try Self.bytes(ListPage(items: [AuditEventView(event)], nextCursor: "YTo3"))
                == #"{"items":[{"action":"admin.revocation","actor":"admin","at":"2026-11-26T10:00:00Z","destination":"sim","detail":{"admin":"admin-1","n":"2"},"id":7,"registrationId":null}],"nextCursor":"YTo3"}"#
        )
    }

    @Test func encoderShapes() throws {
        struct Inner: Encodable { let n: Double; let flag: Bool; let list: [Int?] }
        struct Outer: Encodable {
            let inner: Inner
            let skipped: String?
            @Nullable var kept: String?
            let json: JSONValue
        }
        let value = Outer(inner: Inner(n: 1.5, flag: true, list: [1, nil, 3]), skipped: nil, kept: nil, json: .object(["z": .number(2), "a": .array([])]))
        #expect(try Self.bytes(value) == #"{"inner":{"flag":true,"list":[1,null,3],"n":1.5},"json":{"a":[],"z":2},"kept":null}"#)
        #expect(try Self.bytes(SMPRegistrar.Connection(deviceType: "t", deviceModel: nil)) == #"{"DeviceType":"t"}"#)
        #expect(try Self.bytes(SMPRegistrar.Connection(deviceType: nil, deviceModel: nil)) == "{}")
    }
}
