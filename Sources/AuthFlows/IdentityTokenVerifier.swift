public import Conversation
public import Foundation
import JWTKit
public import Logging
import ParleyEncoding
import Synchronization

/// Who an identity token says the user is, once every check passed.
public struct VerifiedIdentity: Sendable, Equatable {
    /// The provider's issuer (the token's `iss`).
    public let issuer: String
    /// The value of the provider's `userClaim` (default `sub`).
    public let subject: String
    /// Every claim of the token whose value is a string (`sub`, `email`, `preferred_username`,
    /// `upn`, `nonce`, …), as the token carried it.
    public let claims: [String: String]
    /// The token's `exp`.
    public let expiresAt: Date?
    /// The token's `iat`: what a revocation's not-before is compared with.
    public let issuedAt: Date?
    /// OpenID Connect's `auth_time`: when the person last authenticated at the provider.
    public let authTime: Date?
    /// Whether the token says its `email` is verified (`email_verified: true`; the string
    /// `"true"`, as some providers write it, counts too).
    public let emailVerified: Bool

    public init(
        issuer: String, subject: String, claims: [String: String], expiresAt: Date? = nil, issuedAt: Date? = nil, authTime: Date? = nil,
        emailVerified: Bool = false
    ) {
        self.issuer = issuer
        self.subject = subject
        self.claims = claims
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.authTime = authTime
        self.emailVerified = emailVerified
    }

    /// The value of the claim a destination compares sign-ins with (`identity.match`): nil when
    /// the token has none, and for `email` unless the token says it is verified.
    public func matchValue(claim: String) -> String? {
        guard let value = claims[claim], !value.isEmpty else { return nil }
        if claim == "email" && !emailVerified { return nil }
        return value
    }
}

/// An agent's access token (RFC 9068) once every check passed: whose it is, which client it
/// was issued to, who acts for the user (`act.sub`, RFC 8693), and its scopes.
public struct AccessTokenIdentity: Sendable, Equatable {
    public let identity: VerifiedIdentity
    /// `client_id`, else `azp`.
    public let client: String
    public let actor: String?
    /// `scope` (space-separated) and `scp` (string or array) together.
    public let scopes: Set<String>

    public init(identity: VerifiedIdentity, client: String, actor: String?, scopes: Set<String>) {
        self.identity = identity
        self.client = client
        self.actor = actor
        self.scopes = scopes
    }
}

/// Why an identity token was refused: which check failed. `detail` is for the client's problem
/// and the log; it never carries the token or any part of it.
public struct IdentityTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Check: String, Sendable, CaseIterable {
        /// Larger than `IdentityTokenVerifier.maxTokenBytes`; not parsed at all.
        case tooLarge = "too_large"
        /// Not a compact JWS with a JSON header and JSON claims.
        case malformed
        /// An algorithm other than RS256, PS256 or ES256 (`none` and every HMAC among them),
        /// or a key that is not for the token's algorithm.
        case algorithm
        /// `iss` names no listed identity provider.
        case unknownIssuer = "unknown_issuer"
        /// The issuer publishes no key with the token's `kid` (after a refetch, at most once a minute).
        case unknownKey = "unknown_key"
        /// The issuer's key set could not be fetched.
        case keysUnavailable = "keys_unavailable"
        case signature
        case audience
        case expired
        case notYetValid = "not_yet_valid"
        /// `exp`, or the provider's user claim, is missing or not of its type.
        case missingClaim = "missing_claim"
        /// An access token whose `typ` is not `at+jwt` (RFC 9068), e.g. an ID token.
        case tokenType = "token_type"
        /// Issued (`iat`) before a revocation of its user or client (a not-before), or without `iat` where one applies.
        case revoked
        /// From an identity provider the destination does not take (`identity.providers`).
        case providerNotAccepted = "provider_not_accepted"
    }

    public let check: Check
    public let detail: String

    public init(_ check: Check, _ detail: String) {
        self.check = check
        self.detail = detail
    }

    public var description: String { "IdentityTokenError(\(check.rawValue)): \(detail)" }
}

/// Checks identity tokens against the identity providers of the destinations file: the
/// provider is chosen by the token's `iss` (read before the signature is checked, for that
/// only); its key set is fetched from `jwksUri` through Parley's transport, kept, and fetched
/// again when a token names a key it does not hold or the set is an hour old, at most once
/// a minute per provider (concurrent callers wait for the same fetch). Only RS256, PS256 and
/// ES256 are accepted, each only with a key of its own type; `iss`, `aud` (any of the
/// provider's audiences), `exp` (required) and `nbf` are checked with a skew. The signature is
/// checked with jwt-kit.
///
/// A verifier over one provider checks other JWTs as well, e.g. an OAuth2 `id_token` against a
/// destination's `jwksUri` (`IdentityProvider(issuer:jwksURI:audiences: [clientId])`; the caller
/// compares `claims["nonce"]`).
public final class IdentityTokenVerifier: Sendable {
    /// Tokens larger than this are refused before they are parsed.
    public static let maxTokenBytes = 16 * 1024
    /// The longest user name (the provider's `userClaim`) Parley takes.
    public static let maxSubjectBytes = 1024
    /// The largest key set Parley reads.
    public static let maxKeySetBytes = 256 * 1024
    /// The latest `iat` or `auth_time` Parley reads (9999-12-31T23:59:59Z); a later one counts as absent.
    static let latestTime: Double = 253_402_300_799
    /// The algorithms Parley accepts; a key of another type never verifies them.
    public static let algorithms: Set<String> = ["RS256", "PS256", "ES256"]

    public let providers: [String: IdentityProvider]
    let transport: any Transport
    let clock: any WallClock
    let skew: TimeInterval
    let refetchInterval: TimeInterval
    let maxKeySetAge: TimeInterval
    /// How long past `maxKeySetAge` a key set still checks tokens while every refetch fails: an
    /// outage of the provider's key endpoint does not stop sign-ins at once, but a key the
    /// provider withdrew is not trusted for ever either.
    let maxKeySetStaleness: TimeInterval
    let logger: Logger
    private let state = Mutex<[String: ProviderKeys]>([:])

    public init(
        providers: [IdentityProvider], transport: any Transport, clock: any WallClock, skew: Duration = .seconds(60),
        refetchInterval: Duration = .seconds(60), maxKeySetAge: Duration = .seconds(3600), maxKeySetStaleness: Duration = .seconds(6 * 3600),
        logger: Logger
    ) {
        self.maxKeySetStaleness = maxKeySetStaleness.timeInterval
        self.providers = Dictionary(providers.map { ($0.issuer, $0) }, uniquingKeysWith: { first, _ in first })
        self.transport = transport
        self.clock = clock
        self.skew = skew.timeInterval
        self.refetchInterval = refetchInterval.timeInterval
        self.maxKeySetAge = maxKeySetAge.timeInterval
        self.logger = logger
    }

    /// The verified identity the token carries, or the check it failed.
    public func verify(_ token: String) async throws(IdentityTokenError) -> VerifiedIdentity {
        let (parsed, provider) = try await verifiedSignature(token)
        return try check(parsed.claims, provider: provider)
    }

    /// An agent's access token (RFC 9068): signed by a listed provider, of type `at+jwt`, for
    /// one of `resources` (its `aud`: one resource identifier, written any way it may be), naming
    /// the user and the client it was issued to, with its scopes. An ID token or a token for
    /// another resource is refused, whatever else it carries.
    public func verifyAccessToken(_ token: String, resources: [String]) async throws(IdentityTokenError) -> AccessTokenIdentity {
        let (parsed, provider) = try await verifiedSignature(token)
        // RFC 9068 §4: `typ` must be `at+jwt` (media type `application/at+jwt`), so that an ID
        // token of the same provider cannot be passed off as an access token.
        guard let type = parsed.header["typ"]?.string?.lowercased(), type == "at+jwt" || type == "application/at+jwt" else {
            throw IdentityTokenError(.tokenType, "the access token's type ('typ') is not at+jwt (RFC 9068)")
        }
        let identity = try check(parsed.claims, provider: provider, audiences: resources)
        guard let client = parsed.claims["client_id"]?.string ?? parsed.claims["azp"]?.string, !client.isEmpty, client.utf8.count <= 512 else {
            throw IdentityTokenError(.missingClaim, "the access token has no string 'client_id' (or 'azp') naming its client")
        }
        var actor: String?
        if let act = parsed.claims["act"] {
            guard case .object(let members) = act, let sub = members["sub"]?.string, !sub.isEmpty else {
                throw IdentityTokenError(.malformed, "the access token's 'act' is not an object with a string 'sub' (RFC 8693 §4.1)")
            }
            actor = String(sub.prefix(512))
        }
        var scopes: Set<String> = []
        for name in ["scope", "scp"] {
            switch parsed.claims[name] {
            case .string(let list)?: scopes.formUnion(list.split(separator: " ").map(String.init))
            case .strings(let list)?: scopes.formUnion(list)
            default: break
            }
        }
        return AccessTokenIdentity(identity: identity, client: client, actor: actor, scopes: scopes)
    }

    /// The `events` member that makes a JWT an OpenID Connect Back-Channel Logout token.
    public static let backChannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"

    /// An OpenID Connect Back-Channel Logout token (§2.4, §2.6): signed by a listed provider, for
    /// one of its audiences, with `iat`, `jti`, `sub`, an `events` object holding the logout
    /// event, and no `nonce` (so that an ID token cannot pass for one). Returns who is logged out
    /// and the token's `jti` (for replay detection, with its `exp`).
    public func verifyLogoutToken(_ token: String) async throws(IdentityTokenError) -> (identity: VerifiedIdentity, jti: String) {
        let (parsed, provider) = try await verifiedSignature(token)
        let identity = try check(parsed.claims, provider: provider)
        guard case .object(let events)? = parsed.claims["events"], events[Self.backChannelLogoutEvent] != nil else {
            throw IdentityTokenError(.missingClaim, "the logout token's 'events' does not hold the back-channel logout event")
        }
        guard parsed.claims["nonce"] == nil else {
            throw IdentityTokenError(.tokenType, "a logout token carries no 'nonce' (this looks like an ID token)")
        }
        guard identity.issuedAt != nil else { throw IdentityTokenError(.missingClaim, "the logout token has no numeric 'iat'") }
        guard let jti = parsed.claims["jti"]?.string, !jti.isEmpty, jti.utf8.count <= 256 else {
            throw IdentityTokenError(.missingClaim, "the logout token has no string 'jti' of 1 to 256 bytes")
        }
        // Parley ends a user's sessions, not one session: the user must be named.
        guard parsed.claims["sub"]?.string?.isEmpty == false else {
            throw IdentityTokenError(.missingClaim, "the logout token names no user ('sub'); Parley does not end sessions by 'sid' alone")
        }
        return (identity, jti)
    }

    /// The parsed token and its provider, once its algorithm is accepted and its signature
    /// verifies with a key the provider publishes.
    private func verifiedSignature(_ token: String) async throws(IdentityTokenError) -> (ParsedToken, IdentityProvider) {
        guard token.utf8.count <= Self.maxTokenBytes else {
            throw IdentityTokenError(.tooLarge, "the identity token is larger than \(Self.maxTokenBytes) bytes")
        }
        let parsed = try ParsedToken(token)
        guard let algorithm = parsed.header["alg"]?.string, Self.algorithms.contains(algorithm) else {
            throw IdentityTokenError(.algorithm, "the identity token's algorithm is not accepted (only RS256, PS256 and ES256 are)")
        }
        // Unverified, and only to choose whose keys check the signature.
        guard let issuer = parsed.claims["iss"]?.string, let provider = providers[issuer] else {
            throw IdentityTokenError(.unknownIssuer, "the identity token's issuer ('iss') is not one of the identity providers Parley trusts")
        }
        var kid: String?
        if let value = parsed.header["kid"] {
            guard let string = value.string else { throw IdentityTokenError(.malformed, "the identity token's 'kid' is not a string") }
            kid = string
        }
        let key = try await key(of: provider, kid: kid, algorithm: algorithm)
        let valid: Bool
        do {
            valid = try key.verify(parsed.signature, signs: parsed.signingInput)
        } catch {
            valid = false
        }
        guard valid else { throw IdentityTokenError(.signature, "the identity token's signature does not verify with the issuer's key") }
        return (parsed, provider)
    }

    /// The claims of a token whose signature verified.
    /// `audiences`: what `aud` must name one of (default: the provider's audiences).
    func check(
        _ claims: [String: ClaimValue], provider: IdentityProvider, audiences expected: [String]? = nil
    ) throws(IdentityTokenError) -> VerifiedIdentity {
        guard claims["iss"]?.string == provider.issuer else {
            throw IdentityTokenError(.unknownIssuer, "the identity token's issuer ('iss') is not one of the identity providers Parley trusts")
        }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let one)?: audiences = [one]
        case .strings(let many)?: audiences = many
        default: audiences = []
        }
        guard audiences.contains(where: (expected ?? provider.audiences).contains) else {
            throw IdentityTokenError(.audience, "the identity token's audience ('aud') names none of the provider's audiences")
        }
        let now = clock.now.timeIntervalSince1970
        guard case .number(let expiry)? = claims["exp"] else {
            throw IdentityTokenError(.missingClaim, "the identity token has no numeric expiry ('exp')")
        }
        guard now <= expiry + skew else { throw IdentityTokenError(.expired, "the identity token has expired ('exp')") }
        if let notBefore = claims["nbf"] {
            guard case .number(let start) = notBefore else {
                throw IdentityTokenError(.malformed, "the identity token's 'nbf' is not a number")
            }
            guard now + skew >= start else { throw IdentityTokenError(.notYetValid, "the identity token is not valid yet ('nbf')") }
        }
        guard let subject = claims[provider.userClaim]?.string, !subject.isEmpty else {
            throw IdentityTokenError(.missingClaim, "the identity token has no string '\(provider.userClaim)' claim naming the user")
        }
        // Stored and indexed with the registration: a name longer than any issuer's is refused, not failed on.
        guard subject.utf8.count <= Self.maxSubjectBytes else {
            throw IdentityTokenError(.malformed, "the identity token's '\(provider.userClaim)' claim is longer than \(Self.maxSubjectBytes) bytes")
        }
        var strings: [String: String] = [:]
        for (name, value) in claims { if let string = value.string { strings[name] = string } }
        // A time Parley may later write as whole seconds (an assertion's `auth_time`, a SAML
        // `AuthnInstant`): from 1970 to the end of the year 9999, or none. A token may claim
        // `iat: 1e300`; converting that to an integer would stop the process.
        func time(_ name: String) -> Date? {
            guard case .number(let seconds)? = claims[name], seconds.isFinite, (0...Self.latestTime).contains(seconds) else { return nil }
            return Date(timeIntervalSince1970: seconds)
        }
        let emailVerified = claims["email_verified"] == .bool(true) || claims["email_verified"] == .string("true")
        return VerifiedIdentity(
            issuer: provider.issuer, subject: subject, claims: strings, expiresAt: Date(timeIntervalSince1970: expiry), issuedAt: time("iat"),
            authTime: time("auth_time"), emailVerified: emailVerified)
    }

    // MARK: keys

    /// The key that checks a token of `provider` naming `kid` with `algorithm`: from the kept
    /// set, else from a fresh one when a fetch is allowed.
    private func key(of provider: IdentityProvider, kid: String?, algorithm: String) async throws(IdentityTokenError) -> any JWTAlgorithm {
        let now = clock.now
        let kept = state.withLock { $0[provider.issuer]?.keys }
        if let kept, now.timeIntervalSince(kept.fetchedAt) < maxKeySetAge {
            switch kept.find(kid: kid, algorithm: algorithm) {
            case .found(let key): return key
            case .wrongAlgorithm: throw Self.wrongAlgorithm
            case .absent: break
            }
        }
        if let fetch = startFetchIfAllowed(provider, now: now) { await fetch.value }
        guard let keys = state.withLock({ $0[provider.issuer]?.keys }) else {
            throw IdentityTokenError(.keysUnavailable, "the issuer's keys could not be fetched from its jwksUri")
        }
        // Refetches keep failing: the old set serves for a bounded time only.
        guard clock.now.timeIntervalSince(keys.fetchedAt) < maxKeySetAge + maxKeySetStaleness else {
            throw IdentityTokenError(
                .keysUnavailable, "the issuer's keys could not be fetched from its jwksUri for too long; the ones fetched before are no longer trusted")
        }
        switch keys.find(kid: kid, algorithm: algorithm) {
        case .found(let key): return key
        case .wrongAlgorithm: throw Self.wrongAlgorithm
        case .absent:
            throw IdentityTokenError(
                .unknownKey,
                kid == nil
                    ? "the identity token names no key ('kid') and the issuer publishes more or fewer than one key for its algorithm"
                    : "the identity token's key ('kid') is not among the issuer's published keys")
        }
    }

    private static let wrongAlgorithm = IdentityTokenError(.algorithm, "the key the identity token names is not for the token's algorithm")

    /// The running fetch of the provider's keys, or a new one when the last began a minute ago
    /// or more; nil when neither.
    private func startFetchIfAllowed(_ provider: IdentityProvider, now: Date) -> Task<Void, Never>? {
        state.withLock { states -> Task<Void, Never>? in
            var entry = states[provider.issuer] ?? ProviderKeys()
            if let running = entry.fetch { return running }
            if let last = entry.lastAttempt, now.timeIntervalSince(last) < refetchInterval { return nil }
            entry.lastAttempt = now
            let task = Task { [self] in
                let keys = await self.fetchKeys(provider)
                state.withLock { states in
                    if let keys { states[provider.issuer, default: ProviderKeys()].keys = keys }
                    states[provider.issuer, default: ProviderKeys()].fetch = nil
                }
            }
            entry.fetch = task
            states[provider.issuer] = entry
            return task
        }
    }

    /// How many times the provider's keys were fetched (tests).
    public func fetchAttempts(of issuer: String) -> Int { state.withLock { $0[issuer]?.attempts ?? 0 } }

    /// How old each provider's kept key set is, in seconds (for `/metrics`: a set that keeps
    /// ageing past `maxKeySetAge` means its refetches fail).
    public func keySetAges() -> [(issuer: String, seconds: Double)] {
        let now = clock.now
        return state.withLock { states in
            states.compactMap { issuer, entry in entry.keys.map { (issuer, max(0, now.timeIntervalSince($0.fetchedAt))) } }
        }.sorted { $0.issuer < $1.issuer }
    }

    /// Says, when a refetch failed, how long the kept set still serves.
    private func staleness(_ provider: IdentityProvider) -> Logger.Metadata {
        guard let kept = state.withLock({ $0[provider.issuer]?.keys }) else { return ["identity.keys": "none"] }
        let age = clock.now.timeIntervalSince(kept.fetchedAt)
        let left = maxKeySetAge + maxKeySetStaleness - age
        return [
            "identity.keys.age_seconds": "\(Int(age))",
            "identity.keys": left > 0 ? .string("still trusted for \(Int(left)) s") : "no longer trusted",
        ]
    }

    private func fetchKeys(_ provider: IdentityProvider) async -> KeySet? {
        state.withLock { $0[provider.issuer, default: ProviderKeys()].attempts += 1 }
        let request = UpstreamRequest(
            method: "GET", url: provider.jwksURI, headers: ["Accept": "application/jwk-set+json, application/json"],
            timeouts: Timeouts(connect: .seconds(5), total: .seconds(15), idle: .seconds(10)))
        let metadata: Logger.Metadata = ["identity.issuer": .string(provider.issuer)]
        let bytes: [UInt8]
        do {
            let response = try await transport.send(request)
            guard response.status == 200 else {
                response.body.discard()
                logger.warning(
                    "the identity provider's key set could not be fetched",
                    metadata: metadata.merging(["http.status": "\(response.status)"]) { $1 }.merging(staleness(provider)) { $1 })
                return nil
            }
            bytes = try await response.body.collect(upTo: Self.maxKeySetBytes)
        } catch {
            let reason = (error as? TransportError)?.description ?? "transport failure"
            logger.warning(
                "the identity provider's key set could not be fetched",
                metadata: metadata.merging(["error": .string(reason)]) { $1 }.merging(staleness(provider)) { $1 })
            return nil
        }
        guard let keys = await KeySet.parse(bytes, fetchedAt: clock.now) else {
            logger.warning("the identity provider's key set is not a JWK Set", metadata: metadata.merging(staleness(provider)) { $1 })
            return nil
        }
        if keys.keys.isEmpty {
            logger.warning("the identity provider's key set holds no RS256, PS256 or ES256 signing key", metadata: metadata)
        }
        return keys
    }
}

/// What is kept per provider: its last key set, when a fetch last began, the running fetch.
private struct ProviderKeys {
    var keys: KeySet?
    var lastAttempt: Date?
    var fetch: Task<Void, Never>?
    var attempts = 0
}

/// The usable signing keys of one key set, each ready for the algorithms it may check.
struct KeySet: Sendable {
    struct Key: Sendable {
        let kid: String?
        let algorithms: [String: any JWTAlgorithm]
    }

    let keys: [Key]
    let fetchedAt: Date

    enum Lookup {
        case found(any JWTAlgorithm)
        /// The key exists but not for this algorithm (an RSA key named by an ES256 token).
        case wrongAlgorithm
        case absent
    }

    func find(kid: String?, algorithm: String) -> Lookup {
        if let kid {
            let named = keys.filter { $0.kid == kid }
            if let key = named.lazy.compactMap({ $0.algorithms[algorithm] }).first { return .found(key) }
            return named.isEmpty ? .absent : .wrongAlgorithm
        }
        let usable = keys.compactMap { $0.algorithms[algorithm] }
        return usable.count == 1 ? .found(usable[0]) : .absent
    }

    /// A JWK Set (RFC 7517 §5): keys that are not signing keys of RSA or P-256, or that cannot
    /// be read, are left out; private members are never read. Nil when the document is not a set.
    static func parse(_ bytes: [UInt8], fetchedAt: Date) async -> KeySet? {
        guard let document = try? JSONDecoder().decode(Document.self, from: Data(bytes)) else { return nil }
        var keys: [Key] = []
        for entry in document.keys {
            guard entry.use == nil || entry.use == "sig" else { continue }
            var prepared: [String: any JWTAlgorithm] = [:]
            switch entry.kty {
            case "RSA":
                guard let n = entry.n, let e = entry.e else { continue }
                for algorithm in ["RS256", "PS256"] where entry.alg == nil || entry.alg == algorithm {
                    prepared[algorithm] = await prepare(
                        .rsa(JWK.Algorithm(rawValue: algorithm), identifier: "k", modulus: n, exponent: e), algorithm: algorithm)
                }
            case "EC":
                guard entry.crv == "P-256", let x = entry.x, let y = entry.y, entry.alg == nil || entry.alg == "ES256" else { continue }
                prepared["ES256"] = await prepare(.ecdsa(.es256, identifier: "k", x: x, y: y, curve: .p256), algorithm: "ES256")
            default: continue
            }
            if !prepared.isEmpty { keys.append(Key(kid: entry.kid, algorithms: prepared)) }
        }
        return KeySet(keys: keys, fetchedAt: fetchedAt)
    }

    /// jwt-kit's verifier for one public key and one algorithm; nil when jwt-kit cannot use it.
    private static func prepare(_ jwk: JWK, algorithm: String) async -> (any JWTAlgorithm)? {
        let collection = JWTKeyCollection()
        guard (try? await collection.add(jwk: jwk)) != nil,
            let key = try? await collection.getKey(for: "k", alg: algorithm), key.name == algorithm
        else { return nil }
        return key
    }

    struct Document: Decodable {
        let keys: [Entry]
    }

    /// One member of `keys`, read leniently: a member of the wrong type counts as absent.
    struct Entry: Decodable {
        let kty: String?
        let use: String?
        let alg: String?
        let kid: String?
        let n: String?
        let e: String?
        let crv: String?
        let x: String?
        let y: String?

        enum CodingKeys: String, CodingKey { case kty, use, alg, kid, n, e, crv, x, y }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            func text(_ key: CodingKeys) -> String? { (try? c.decodeIfPresent(String.self, forKey: key)) ?? nil }
            kty = text(.kty)
            use = text(.use)
            alg = text(.alg)
            kid = text(.kid)
            n = text(.n)
            e = text(.e)
            crv = text(.crv)
            x = text(.x)
            y = text(.y)
        }
    }
}

/// A JSON value of a JWT header or claim set, as far as Parley reads it.
enum ClaimValue: Decodable, Equatable {
    case string(String)
    case strings([String])
    case number(Double)
    case bool(Bool)
    /// A JSON object (`act`, RFC 8693), one level read the same way.
    case object([String: ClaimValue])
    case other

    var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .other
        } else if let value = try? c.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? c.decode(Double.self) {
            self = .number(value)
        } else if let value = try? c.decode(String.self) {
            self = .string(value)
        } else if let value = try? c.decode([String].self) {
            self = .strings(value)
        } else if decoder.codingPath.count < 2, let value = try? c.decode([String: ClaimValue].self) {
            self = .object(value)
        } else {
            self = .other
        }
    }
}

/// A compact JWS split and decoded, nothing checked but its shape.
struct ParsedToken {
    let header: [String: ClaimValue]
    let claims: [String: ClaimValue]
    let signingInput: [UInt8]
    let signature: [UInt8]

    init(_ token: String) throws(IdentityTokenError) {
        let malformed = IdentityTokenError(
            .malformed, "the identity token is not a compact JWS (three base64url parts: a JSON header, JSON claims, a signature)")
        let bytes = Array(token.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        // An empty signature (`alg: none`) is read, so that the algorithm check names it.
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, parts.allSatisfy({ $0.allSatisfy(Self.isBase64URL) }) else {
            throw malformed
        }
        guard let headerBytes = Base64.decode(String(decoding: parts[0], as: UTF8.self)),
            let claimBytes = Base64.decode(String(decoding: parts[1], as: UTF8.self)),
            let signature = Base64.decode(String(decoding: parts[2], as: UTF8.self)),
            let header = try? JSONDecoder().decode([String: ClaimValue].self, from: Data(headerBytes)),
            let claims = try? JSONDecoder().decode([String: ClaimValue].self, from: Data(claimBytes))
        else { throw malformed }
        // RFC 7515 §4.1.11: an extension Parley does not understand must not be ignored.
        guard header["crit"] == nil else {
            throw IdentityTokenError(.malformed, "the identity token's header lists critical extensions ('crit') Parley does not support")
        }
        self.header = header
        self.claims = claims
        self.signature = signature
        signingInput = Array(bytes[..<(parts[0].count + 1 + parts[1].count)])
    }

    private static func isBase64URL(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }
}
