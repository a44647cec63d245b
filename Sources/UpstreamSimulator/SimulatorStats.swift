/// Every counter of the simulator, as `GET /sim/stats` returns it, so tests that run the
/// simulator as a separate process can read them (decode this type from the JSON).
public struct SimulatorStats: Codable, Sendable, Equatable {
    public struct SMP: Codable, Sendable, Equatable {
        public var sessionsCreated: Int
        public var activeSessions: Int
        public var basicChallenges: Int
        public var registrations: Int
        public var deletedRegistrations: Int
        public var csrfFetches: Int
        public var csrfRejections: Int
        public var csrfAccepted: Int
        public var secureUploadChallenges: Int
        public var secureUploadSuccesses: Int
    }

    public struct OAuth: Codable, Sendable, Equatable {
        public var tokenCallsByGrant: [String: Int]
        public var tokenErrorsByCode: [String: Int]
        public var revocationsByHint: [String: Int]
        public var resourceCalls: [String: Int]
        public var resourceRejections: [String: Int]
        public var authorizePages: Int
        public var authorizeLogins: Int
        public var authorizeFailures: Int
        public var accessTokensIssued: Int
        public var refreshTokensIssued: Int
        /// Codes issued at once from a login session, `id_token`s issued, `/oauth/userinfo` calls.
        public var silentAuthorizations: Int
        public var idTokensIssued: Int
        public var userinfoCalls: Int
    }

    /// The `/sp` service provider and the mock IdP (see `SAMLState`).
    public struct SAML: Codable, Sendable, Equatable {
        public var authnRequestsIssued: Int
        public var assertionsAccepted: Int
        public var assertionsRejected: Int
        public var unregisteredACSRefusals: Int
        public var idpLogins: Int
        public var idpLoginFailures: Int
    }

    /// One-time passcodes at `/sp` and `/basic-otp` (see `OTPState`).
    public struct OTP: Codable, Sendable, Equatable {
        public var challenges: Int
        public var verifications: Int
        public var rejectedPasscodes: Int
    }

    /// Requests per route, keyed like `"GET /api/data"` (see `SimulatorState.requests(route:)`).
    public var requestsByRoute: [String: Int]
    public var openStalls: Int
    public var abandonedStalls: Int
    public var smp: SMP
    public var oauth: OAuth
    public var saml: SAML
    public var otp: OTP
}

extension SimulatorState {
    /// A snapshot of every counter.
    public var stats: SimulatorStats {
        SimulatorStats(
            requestsByRoute: requestsByRoute, openStalls: openStalls, abandonedStalls: abandonedStalls,
            smp: smp.snapshot, oauth: oauth.snapshot, saml: saml.snapshot, otp: otp.snapshot)
    }
}
