import Foundation
import Hummingbird
import HummingbirdCore
import ParleyDomain
@testable import ParleyServer
import Testing

/// The admin API's query strings and revocation body, decoded into typed queries by the
/// controller: the same checks, in the same order, with the same words as the API gives.
@Suite struct AdminInputTests {
    static func query(_ text: String) -> Parameters { URI("/admin/v1/x?" + text).queryParameters }

    static func refusal(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            #expect(error is InvalidInput)
            #expect(Problem.from(error).status == .badRequest)
            #expect(Problem.from(error).code == .invalidRequest)
            return Problem.from(error).detail
        }
    }

    @Test func registrationListQuery() throws {
        let empty = try RegistrationQuery(Self.query(""))
        #expect(empty.destination == nil && empty.userHint == nil && empty.limit == 50 && empty.after == nil)

        let cursor = RegistrationCursor(createdAtMicros: 1_700_000_000_000_000, id: UUID())
        let full = try RegistrationQuery(Self.query("destination=sim&userHint=alice%40example&limit=500&cursor=\(cursor.encoded)"))
        #expect(full.destination == "sim")
        #expect(full.userHint == "alice@example")
        #expect(full.limit == 500)
        #expect(full.after == cursor)

        let refused: [(String, String)] = [
            ("limit=0", "limit must be a whole number from 1 to 500"),
            ("limit=501", "limit must be a whole number from 1 to 500"),
            ("limit=ten", "limit must be a whole number from 1 to 500"),
            ("destination=", "destination must be 1 to 2048 bytes without control characters"),
            ("userHint=a%0Ab", "userHint must be 1 to 2048 bytes without control characters"),
            ("cursor=bm90LW91cnM", "cursor is not one Parley handed out"),
            ("cursor=%7F", "cursor must be 1 to 2048 bytes without control characters"),
            // The checks run in the order of the parameters in the contract: the first refusal is the answer.
            ("cursor=nope&limit=0", "limit must be a whole number from 1 to 500"),
            ("limit=0&destination=", "destination must be 1 to 2048 bytes without control characters"),
        ]
        for (text, detail) in refused {
            #expect(Self.refusal { _ = try RegistrationQuery(Self.query(text)) } == detail, "\(text)")
        }
    }

    @Test func auditQuery() throws {
        let empty = try AuditQuery(Self.query(""))
        #expect(empty == AuditQuery(since: nil, limit: 50, before: nil))

        let cursor = AuditCursor(id: 42)
        #expect(AuditCursor(encoded: cursor.encoded) == cursor)
        let full = try AuditQuery(Self.query("since=2026-11-26T10:00:00Z&limit=2&cursor=\(cursor.encoded)"))
        #expect(full == AuditQuery(since: Date(timeIntervalSince1970: 1_795_687_200), limit: 2, before: cursor))

        let refused: [(String, String)] = [
            ("since=yesterday", "since must be an RFC 3339 date-time"),
            ("since=", "since must be 1 to 2048 bytes without control characters"),
            ("limit=-1", "limit must be a whole number from 1 to 500"),
            ("cursor=eDo0Mg", "cursor is not one Parley handed out"),  // "x:42"
            // Text checks come before reading: a bad limit wins over a bad since.
            ("since=yesterday&limit=0", "limit must be a whole number from 1 to 500"),
            ("since=yesterday&cursor=eDo0Mg", "since must be an RFC 3339 date-time"),
        ]
        for (text, detail) in refused {
            #expect(Self.refusal { _ = try AuditQuery(Self.query(text)) } == detail, "\(text)")
        }
    }

    @Test func revocationRequest() throws {
        let id = UUID()
        let typed = try RevocationRequest(registrationId: id.uuidString, destination: "sim", userHint: nil, scopeKey: "https://x/", upstream: true)
            .revocation()
        #expect(typed == Revocation(filter: RevocationFilter(registrationID: id, destination: "sim", scopeKey: "https://x/"), upstream: true))
        #expect(try RevocationRequest(destination: "sim").revocation().upstream == false)
        // An empty filter is the room's refusal, not the decoder's.
        #expect(try RevocationRequest().revocation().filter.isEmpty)

        let refused: [(RevocationRequest, String)] = [
            (RevocationRequest(registrationId: "not-a-uuid"), "registrationId must be a UUID"),
            (RevocationRequest(destination: ""), "destination must be 1 to 2048 bytes without control characters"),
            (RevocationRequest(userHint: "a\u{0}b"), "userHint must be 1 to 2048 bytes without control characters"),
            (RevocationRequest(scopeKey: String(repeating: "k", count: 2049)), "scopeKey must be 1 to 2048 bytes without control characters"),
            (RevocationRequest(registrationId: "x", destination: ""), "registrationId must be a UUID"),
        ]
        for (request, detail) in refused {
            #expect(Self.refusal { _ = try request.revocation() } == detail)
        }
    }
}
