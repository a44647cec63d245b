import ParleyEncoding
import ParleyCrypto
import Synchronization

/// One SMP application registration (`POST …/Connections`).
public struct SMPRegistration: Sendable, Equatable {
    public let appcid: String
    public let appId: String
    public let deviceType: String?
    public let deviceModel: String?
    public internal(set) var deleted: Bool
}

/// Sessions, CSRF tokens and registrations of the simulated SMP, with their counters.
public final class SMPState: Sendable {
    private let data = Mutex(Data())

    init() {}

    /// Sessions opened: by Basic or a bearer token at the root (each hands out an `SMPSESSION`
    /// cookie), and by every SAML login at `/sp` (behind its `SP_SESSION`, for CSRF tokens).
    public var sessionsCreated: Int { data.withLock { $0.sessionsCreated } }
    /// `401` + `WWW-Authenticate: Basic realm=…` answers on session-aware routes.
    public var basicChallenges: Int { data.withLock { $0.basicChallenges } }
    /// Sessions still valid.
    public var activeSessions: Int { data.withLock { $0.sessions.count } }

    /// Every registration ever made, deleted ones included, by APPCID.
    public var registrations: [String: SMPRegistration] { data.withLock { $0.registrations } }
    public var registeredAppcids: Set<String> {
        data.withLock { Set($0.registrations.values.filter { !$0.deleted }.map(\.appcid)) }
    }
    public var deletedAppcids: Set<String> {
        data.withLock { Set($0.registrations.values.filter(\.deleted).map(\.appcid)) }
    }

    /// `X-CSRF-Token: Fetch` answers, and state-changing calls refused for a missing or stale token.
    public var csrfFetches: Int { data.withLock { $0.csrfFetches } }
    public var csrfRejections: Int { data.withLock { $0.csrfRejections } }
    public var csrfAccepted: Int { data.withLock { $0.csrfAccepted } }

    /// `/secure/upload`: `401` answers (after draining the body) and hashed uploads.
    public var secureUploadChallenges: Int { data.withLock { $0.secureUploadChallenges } }
    public var secureUploadSuccesses: Int { data.withLock { $0.secureUploadSuccesses } }

    /// Invalidates every CSRF token (`POST /sim/csrf/rotate`).
    public func rotateCSRFTokens() {
        data.withLock { data in
            for id in data.sessions.keys { data.sessions[id]?.csrfToken = nil }
        }
    }

    /// Forgets every session, so the next call needs Basic again (`POST /sim/sessions/expire`).
    public func expireSessions() {
        data.withLock { data in
            data.sessions = [:]
            data.sessionOrder = []
        }
    }

    // MARK: Internal

    func isValidSession(_ id: String) -> Bool {
        data.withLock { $0.sessions[id] != nil }
    }

    func createSession(user: String) -> String {
        let id = SecureRandom.token()
        data.withLock { data in
            data.sessions[id] = Session(user: user)
            data.sessionOrder.append(id)
            data.sessionsCreated += 1
            if data.sessionOrder.count > Self.maxSessions {
                let excess = data.sessionOrder.count - Self.maxSessions
                for old in data.sessionOrder.prefix(excess) { data.sessions[old] = nil }
                data.sessionOrder.removeFirst(excess)
            }
        }
        return id
    }

    func countBasicChallenge() { data.withLock { $0.basicChallenges += 1 } }

    /// The session's current CSRF token, minted when it has none.
    func fetchCSRFToken(session: String) -> String? {
        data.withLock { data -> String? in
            guard var current = data.sessions[session] else { return nil }
            data.csrfFetches += 1
            if let token = current.csrfToken { return token }
            let token = SecureRandom.token(byteCount: 18)
            current.csrfToken = token
            data.sessions[session] = current
            return token
        }
    }

    /// Checks the token a state-changing call carries and counts the outcome.
    func checkCSRFToken(session: String, presented: String?) -> Bool {
        data.withLock { data -> Bool in
            guard let presented, let expected = data.sessions[session]?.csrfToken,
                SimHTTP.secretsMatch(presented, expected)
            else {
                data.csrfRejections += 1
                return false
            }
            data.csrfAccepted += 1
            return true
        }
    }

    func register(appId: String, deviceType: String?, deviceModel: String?) -> SMPRegistration {
        let registration = SMPRegistration(
            appcid: randomUUID(), appId: appId, deviceType: deviceType, deviceModel: deviceModel, deleted: false)
        data.withLock { $0.registrations[registration.appcid] = registration }
        return registration
    }

    /// Marks a live registration of `appId` deleted; false when there is none.
    func deleteRegistration(appcid: String, appId: String) -> Bool {
        data.withLock { data -> Bool in
            guard let registration = data.registrations[appcid], registration.appId == appId, !registration.deleted else {
                return false
            }
            data.registrations[appcid]?.deleted = true
            return true
        }
    }

    func isKnown(appcid: String) -> Bool {
        data.withLock { $0.registrations[appcid].map { !$0.deleted } ?? false }
    }

    func countSecureUpload(success: Bool) {
        data.withLock { data in
            if success { data.secureUploadSuccesses += 1 } else { data.secureUploadChallenges += 1 }
        }
    }

    var snapshot: SimulatorStats.SMP {
        data.withLock { data in
            SimulatorStats.SMP(
                sessionsCreated: data.sessionsCreated,
                activeSessions: data.sessions.count,
                basicChallenges: data.basicChallenges,
                registrations: data.registrations.values.filter { !$0.deleted }.count,
                deletedRegistrations: data.registrations.values.filter(\.deleted).count,
                csrfFetches: data.csrfFetches,
                csrfRejections: data.csrfRejections,
                csrfAccepted: data.csrfAccepted,
                secureUploadChallenges: data.secureUploadChallenges,
                secureUploadSuccesses: data.secureUploadSuccesses
            )
        }
    }

    /// Bounds memory in long demo runs: the oldest sessions go first.
    static let maxSessions = 10_000

    private struct Session {
        let user: String
        var csrfToken: String?
    }

    private struct Data {
        var sessions: [String: Session] = [:]
        var sessionOrder: [String] = []
        var sessionsCreated = 0
        var basicChallenges = 0
        var registrations: [String: SMPRegistration] = [:]
        var csrfFetches = 0
        var csrfRejections = 0
        var csrfAccepted = 0
        var secureUploadChallenges = 0
        var secureUploadSuccesses = 0
    }
}

/// A random (version 4) UUID in upper-case text form, as SMP shows APPCIDs.
func randomUUID() -> String {
    var bytes = SecureRandom.bytes(16)
    bytes[6] = (bytes[6] & 0x0F) | 0x40
    bytes[8] = (bytes[8] & 0x3F) | 0x80
    let hex = Hex.encode(bytes).uppercased()
    let h = Array(hex)
    return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(h[$0]) }.joined(separator: "-")
}
