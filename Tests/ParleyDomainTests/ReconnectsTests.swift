import AuthFlows
import Conversation
import Foundation
import Logging
import ParleyCrypto
import ParleyDomain
import ParleyTesting
import Testing

/// `Reconnects`, built as `compose` builds it: before the token broker and the conversations,
/// from what starts flows and the caches below the conversations. A rejected refresh makes an
/// active registration `reconnect_required` with a fresh oauth2 flow, announced to every
/// instance; a pending flow is reused; a registration that is not active is left alone.
@Suite struct ReconnectsTests {
    struct Room {
        let registrations = InMemoryRegistrations()
        let flows = InMemoryFlows()
        let signals = InMemoryCacheSignals()
        let reconnects: Reconnects
        let starter: FlowStarter

        init() throws {
            let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            let secrets = Secrets(keyRing: try KeyRing(keys: [("test", [UInt8](repeating: 7, count: 32))]))
            let audit = AuditLog(repository: InMemoryAudit(), logger: logger)
            starter = FlowStarter(flows: flows, secrets: secrets, audit: audit, clock: SystemClock(), publicURL: "https://parley.example")
            let news = RegistrationNews(
                signals: signals, clientTokens: ClientTokens(registrations: registrations), tokens: InMemoryTokens(),
                notBefores: NotBefores(repository: InMemoryNotBefores()), logger: logger)
            reconnects = Reconnects(registrations: registrations, starter: starter, news: news, logger: logger)
        }

        func register(status: RegistrationStatus = .active) async throws -> RegistrationRecord {
            let record = RegistrationRecord(
                id: UUID(), destination: "oauth-api", status: status, deviceType: nil, deviceModel: nil, userHint: nil, returnUrl: nil,
                credentialsSealed: nil, clientCertificateSealed: nil, createdAt: Date())
            try await registrations.insert(record, clientTokenHash: SHA256.hash(Array(record.idString.utf8)))
            return record
        }
    }

    @Test func aRejectedRefreshAsksForAPersonWithAFreshFlowAndTellsEveryInstance() async throws {
        let room = try Room()
        let record = try await room.register()
        var heard = room.signals.events().makeAsyncIterator()
        #expect(try await heard.next() == .all)

        await room.reconnects.refreshRejected(registration: record.id, scopeKey: "orders")

        let changed = try #require(try await room.registrations.find(id: record.id))
        #expect(changed.status == .reconnectRequired)
        let flow = try #require(try await room.flows.latest(registrationID: record.id, purpose: .login))
        #expect(flow.kind == .oauth2 && flow.scopeKey == "orders" && flow.status == .pending)
        #expect(try await heard.next() == .registration(record.id), "every instance hears of the change")
    }

    @Test func aPendingFlowIsReusedAndAnInactiveRegistrationIsLeftAlone() async throws {
        let room = try Room()
        let record = try await room.register()
        let (pending, _) = try await room.starter.create(for: record, kind: .oauth2, scopeKey: "orders")
        await room.reconnects.refreshRejected(registration: record.id, scopeKey: "orders")
        #expect(try await room.flows.latest(registrationID: record.id, purpose: .login)?.id == pending.id)
        #expect(try await room.registrations.find(id: record.id)?.status == .reconnectRequired)

        let waiting = try await room.register(status: .loginRequired)
        await room.reconnects.refreshRejected(registration: waiting.id, scopeKey: "orders")
        #expect(try await room.registrations.find(id: waiting.id)?.status == .loginRequired)
        #expect(try await room.flows.latest(registrationID: waiting.id, purpose: .login) == nil)
    }
}
