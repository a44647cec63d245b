import Foundation
import Testing

import ParleyDomain

/// A registration record shares its fields until a copy is changed: it must still behave as a
/// value (a change to one copy is never seen through another).
@Suite struct RegistrationRecordTests {
    private func record() -> RegistrationRecord {
        RegistrationRecord(
            id: UUID(), destination: "odata", status: .active, deviceType: "iPhone", deviceModel: nil, userHint: "alice",
            returnUrl: nil, credentialsSealed: [1, 2, 3], clientCertificateSealed: nil, createdAt: Date(timeIntervalSince1970: 1_800_000_000))
    }

    @Test func aChangedCopyLeavesTheOriginalAsItWas() {
        let original = record()
        var copy = original
        #expect(copy == original)
        copy.status = .pendingApproval
        copy.credentialsSealed = nil
        copy.userHint = "bob"
        #expect(original.status == .active && original.credentialsSealed == [1, 2, 3] && original.userHint == "alice")
        #expect(copy.status == .pendingApproval && copy.credentialsSealed == nil && copy.userHint == "bob")
        #expect(copy != original)
        copy.status = .active
        copy.credentialsSealed = [1, 2, 3]
        copy.userHint = "alice"
        #expect(copy == original)  // equal by their fields, not by sharing them
    }

    @Test func theIdTextFollowsTheId() {
        var changed = record()
        let before = changed
        let id = UUID()
        changed.id = id
        #expect(changed.idString == id.uuidString.lowercased())
        #expect(before.idString == before.id.uuidString.lowercased() && before.idString != changed.idString)
    }
}
