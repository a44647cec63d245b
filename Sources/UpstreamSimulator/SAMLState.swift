import Foundation
import ParleyCrypto
import Synchronization

/// The `/sp` service provider's settings and the mock IdP's registered ACS URLs, signing key,
/// used response IDs and counters.
public final class SAMLState: Sendable {
    /// The secret the IdP signs assertions with (HMAC-SHA256) and the SP checks them with.
    let signingKey = SecureRandom.bytes(32)
    private let data = Mutex(Data())

    init() {}

    // MARK: Counters

    /// SAML challenges (AuthnRequests) the SP answered with.
    public var authnRequestsIssued: Int { data.withLock { $0.authnRequestsIssued } }
    /// SAMLResponses the ACS accepted (each opened a session), and those it refused with `403`.
    public var assertionsAccepted: Int { data.withLock { $0.assertionsAccepted } }
    public var assertionsRejected: Int { data.withLock { $0.assertionsRejected } }
    /// AuthnRequests the IdP refused because their ACS URL is not registered.
    public var unregisteredACSRefusals: Int { data.withLock { $0.unregisteredACSRefusals } }
    /// IdP logins that produced a SAMLResponse, and those refused for wrong credentials.
    public var idpLogins: Int { data.withLock { $0.idpLogins } }
    public var idpLoginFailures: Int { data.withLock { $0.idpLoginFailures } }

    // MARK: Test controls

    /// The SP's binding, identifying header, OTP mode and session-cookie scope.
    public var settings: SPSettings {
        get { data.withLock { $0.settings } }
        set { data.withLock { $0.settings = newValue } }
    }

    /// Changes the settings in one step (`POST /control/sp`).
    public func updateSettings(_ change: (inout SPSettings) -> Void) {
        data.withLock { change(&$0.settings) }
    }

    /// The ACS URLs the IdP accepts, compared exactly.
    public var registeredACSURLs: [String] {
        get { data.withLock { $0.acsURLs } }
        set { data.withLock { $0.acsURLs = newValue } }
    }

    // MARK: Internal

    /// Starts from the configuration's settings and ACS URLs (called once, by `buildSimulator`).
    func configure(from configuration: SimulatorConfiguration) {
        data.withLock { data in
            data.settings = configuration.spSettings
            data.acsURLs = configuration.samlACSURLs
        }
    }

    func isRegistered(acsURL: String) -> Bool {
        data.withLock { $0.acsURLs.contains(acsURL) }
    }

    func countAuthnRequest() { data.withLock { $0.authnRequestsIssued += 1 } }
    func countUnregisteredACS() { data.withLock { $0.unregisteredACSRefusals += 1 } }

    func countAssertion(accepted: Bool) {
        data.withLock { data in
            if accepted { data.assertionsAccepted += 1 } else { data.assertionsRejected += 1 }
        }
    }

    func countIdPLogin(success: Bool) {
        data.withLock { data in
            if success { data.idpLogins += 1 } else { data.idpLoginFailures += 1 }
        }
    }

    /// Marks the response's and the assertion's IDs used until `expiry`; false when one of them
    /// was used before. Expired entries are forgotten (their messages fail the expiry check anyway).
    func useOnce(ids: [String], expiry: Date, now: Date) -> Bool {
        data.withLock { data in
            data.usedIDs = data.usedIDs.filter { $0.value > now }
            guard ids.allSatisfy({ data.usedIDs[$0] == nil }) else { return false }
            for id in ids { data.usedIDs[id] = expiry }
            return true
        }
    }

    var snapshot: SimulatorStats.SAML {
        data.withLock { data in
            SimulatorStats.SAML(
                authnRequestsIssued: data.authnRequestsIssued,
                assertionsAccepted: data.assertionsAccepted,
                assertionsRejected: data.assertionsRejected,
                unregisteredACSRefusals: data.unregisteredACSRefusals,
                idpLogins: data.idpLogins,
                idpLoginFailures: data.idpLoginFailures
            )
        }
    }

    private struct Data {
        var settings = SPSettings()
        var acsURLs: [String] = []
        var usedIDs: [String: Date] = [:]
        var authnRequestsIssued = 0
        var assertionsAccepted = 0
        var assertionsRejected = 0
        var unregisteredACSRefusals = 0
        var idpLogins = 0
        var idpLoginFailures = 0
    }
}

/// Time-based one-time passcodes (6 digits, 30 s steps, HMAC-SHA256 of a per-user secret) and
/// their counters, for `/sp` and `/basic-otp`.
public final class OTPState: Sendable {
    /// Seconds per time step.
    public static let step = 30
    /// Every user's secret is derived from this one.
    private let masterKey = SecureRandom.bytes(32)
    private let data = Mutex(Counters())

    init() {}

    /// OTP challenges answered (`302` + `x-smp-authentication: otp-challenge`).
    public var challenges: Int { data.withLock { $0.challenges } }
    /// Right passcodes, and wrong ones (`POST …/otp`).
    public var verifications: Int { data.withLock { $0.verifications } }
    public var rejectedPasscodes: Int { data.withLock { $0.rejectedPasscodes } }

    /// The passcode of `user` now (what `GET /control/otp/code?user=` returns). It is accepted
    /// during its own time step and the next one.
    public func currentCode(user: String) -> String {
        code(user: user, step: Self.timeStep(Date()))
    }

    // MARK: Internal

    /// Whether `passcode` is the user's code of the current or the previous step; counted.
    func verify(passcode: String, user: String, now: Date = Date()) -> Bool {
        let current = Self.timeStep(now)
        let presented = Array(passcode.utf8)
        // Both compared, so the time taken does not tell which one matched.
        let matchesCurrent = constantTimeEquals(presented, Array(code(user: user, step: current).utf8))
        let matchesPrevious = constantTimeEquals(presented, Array(code(user: user, step: current == 0 ? 0 : current - 1).utf8))
        let valid = matchesCurrent || matchesPrevious
        data.withLock { counters in
            if valid { counters.verifications += 1 } else { counters.rejectedPasscodes += 1 }
        }
        return valid
    }

    func countChallenge() { data.withLock { $0.challenges += 1 } }

    var snapshot: SimulatorStats.OTP {
        data.withLock { counters in
            SimulatorStats.OTP(
                challenges: counters.challenges, verifications: counters.verifications, rejectedPasscodes: counters.rejectedPasscodes)
        }
    }

    /// RFC 4226 dynamic truncation of HMAC-SHA256(user secret, big-endian step), 6 digits.
    func code(user: String, step: UInt64) -> String {
        let secret = HMACSHA256.authenticate(Array("otp-user:\(user)".utf8), key: masterKey)
        let counter = (0..<8).reversed().map { UInt8(truncatingIfNeeded: step >> (UInt64($0) * 8)) }
        let digest = HMACSHA256.authenticate(counter, key: secret)
        guard let last = digest.last, digest.count >= 20 else { return "000000" }
        let offset = Int(last & 0x0F)  // at most 15, so offset + 3 < 20
        let value = digest[offset...(offset + 3)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } & 0x7FFF_FFFF
        let digits = String(value % 1_000_000)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }

    static func timeStep(_ now: Date) -> UInt64 {
        let seconds = now.timeIntervalSince1970
        guard seconds.isFinite, seconds > 0, seconds < 1e15 else { return 0 }
        return UInt64(seconds) / UInt64(step)
    }

    private struct Counters {
        var challenges = 0
        var verifications = 0
        var rejectedPasscodes = 0
    }
}

/// One browser session of a protected area (`/sp` or `/basic-otp`).
struct WebSession: Sendable {
    let user: String
    /// The SMP session the shared SMP endpoints (CSRF tokens) work with; nil where none is needed.
    let smpSession: String?
    var otpVerified = false
    /// Where the browser goes after the OTP (RelayState, or the resource that got the OTP challenge).
    var originalURL: String?
}

/// The in-memory sessions of one protected area.
final class WebSessions: Sendable {
    private let data = Mutex(Data())

    var count: Int { data.withLock { $0.sessions.count } }

    /// A new session under a random id.
    func create(user: String, smpSession: String?, originalURL: String?) -> (id: String, session: WebSession) {
        let id = SecureRandom.token()
        let session = WebSession(user: user, smpSession: smpSession, originalURL: originalURL)
        data.withLock { data in
            data.sessions[id] = session
            data.order.append(id)
            if data.order.count > SMPState.maxSessions {
                let excess = data.order.count - SMPState.maxSessions
                for old in data.order.prefix(excess) { data.sessions[old] = nil }
                data.order.removeFirst(excess)
            }
        }
        return (id, session)
    }

    func session(_ id: String) -> WebSession? {
        data.withLock { $0.sessions[id] }
    }

    func setOriginalURL(_ url: String, for id: String) {
        data.withLock { $0.sessions[id]?.originalURL = url }
    }

    func markOTPVerified(_ id: String) {
        data.withLock { $0.sessions[id]?.otpVerified = true }
    }

    func expireAll() {
        data.withLock { data in
            data.sessions = [:]
            data.order = []
        }
    }

    private struct Data {
        var sessions: [String: WebSession] = [:]
        var order: [String] = []
    }
}
