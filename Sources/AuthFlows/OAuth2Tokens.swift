import ParleyEncoding
public import Conversation
public import Foundation
import ParleyCrypto
import Tracing

/// Which token: the destination, the owning registration (nil for client-credentials
/// tokens, which the destination's registrations share) and the scope key.
public struct TokenKey: Sendable, Hashable, CustomStringConvertible {
    public let destination: String
    public let registrationID: String?
    public let scopeKey: String

    public init(destination: String, registrationID: String?, scopeKey: String) {
        self.destination = destination
        self.registrationID = registrationID
        self.scopeKey = scopeKey
    }

    /// The key `description` names, or nil when it names none: a destination's name has no `|`
    /// and a registration's id none, so the scope key is whatever follows the second.
    public init?(description: String) {
        let parts = description.split(separator: "|", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        self.init(destination: String(parts[0]), registrationID: parts[1] == "-" ? nil : String(parts[1]), scopeKey: String(parts[2]))
    }

    /// `destination|registration|scope key`: the lease's and the cache signal's name of the
    /// token, and its seal binding. Made when asked, off the proxy path: a proxied call makes a
    /// key from strings it already holds (no allocation), and the token cache keys by the parts.
    public var description: String { "\(destination)|\(registrationID ?? "-")|\(scopeKey)" }
}

/// An OAuth2 token as Parley keeps it (sealed at rest by the store).
public struct StoredToken: Sendable, Equatable {
    public var accessToken: String
    public var refreshToken: String?
    public var tokenType: String
    public var scopes: String?
    public var expiresAt: Date?
    /// The OpenID Connect `id_token` of the token response that brought this token, as sent
    /// (unchecked): only the authorization-code callback reads it, to learn who signed in. It is
    /// never stored (no repository writes it) and never logged.
    public var idToken: String?

    public init(
        accessToken: String, refreshToken: String?, tokenType: String = "Bearer", scopes: String? = nil, expiresAt: Date?,
        idToken: String? = nil
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.scopes = scopes
        self.expiresAt = expiresAt
        self.idToken = idToken
    }

    /// Fresh while more than `skew` remains before expiry. A stale token is never sent as fresh.
    public func isFresh(at now: Date, skew: TimeInterval = 30) -> Bool {
        guard let expiresAt else { return true }
        return expiresAt.timeIntervalSince(now) > skew
    }
}

/// Token rows, read and written inside an exclusive section.
public protocol TokenAccess: Sendable {
    func load(_ key: TokenKey) async throws -> StoredToken?
    func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws
    func delete(_ key: TokenKey) async throws
}

/// Where tokens live. `exclusively` serialises work on one key across every
/// instance (PostgreSQL: a transaction-scoped advisory lock) and lends the body
/// the same connection, so a section never waits for a second one.
public protocol TokenStore: Sendable {
    func load(_ key: TokenKey) async throws -> StoredToken?
    func exclusively<T: Sendable>(_ key: TokenKey, _ body: @Sendable (any TokenAccess) async throws -> T) async throws -> T
}

/// Why Parley could not get a token. `description` never carries a token or secret.
public struct OAuth2Error: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// The authorization server is down or throttling: try again after `retryAfter`.
        case temporarilyUnavailable
        /// The authorization server refused the grant Parley holds (wrong client secret, bad password…).
        case refused
        /// Parley's own limit on calls to this destination's token endpoint: try after `retryAfter`.
        case rateLimited
        /// The authorization server answered nonsense (not a usable token response): `502`.
        case invalidResponse
        /// A propagation grant cannot speak for the user: the registration's identity token has
        /// expired (or is not held); the client renews it (`401 invalid_identity_token`).
        case identityTokenExpired
    }

    public let code: Code
    public let retryAfter: Duration?
    public let detail: String

    public init(_ code: Code, retryAfter: Duration? = nil, detail: String) {
        self.code = code
        self.retryAfter = retryAfter
        self.detail = detail
    }

    public var description: String { "OAuth2Error(\(code)): \(detail)" }
}

/// Talks to one authorization server's token and revocation endpoints (RFC 6749 §4, RFC 7009)
/// over the same transport as everything else. Form bodies, client authentication
/// by `client_secret_basic` or `client_secret_post`; public clients send only `client_id`.
/// A class: one per destination, shared by the conversation managers of all its registrations.
public final class TokenEndpointClient: Sendable {
    public let settings: OAuth2Settings
    public let transport: any Transport
    public let tls: TLSOptions
    public let clock: any WallClock

    public init(settings: OAuth2Settings, transport: any Transport, tls: TLSOptions, clock: any WallClock) {
        self.settings = settings
        self.transport = transport
        self.tls = tls
        self.clock = clock
    }

    public func request(_ parameters: [(String, String)], previousRefreshToken: String? = nil) async -> TokenEndpointOutcome {
        // A span per call: grant type and outcome only, never a parameter's value but the grant's name.
        let span = startSpan("oauth2 token request", ofKind: .client)
        defer { span.end() }
        let outcome = await exchange(parameters, previousRefreshToken: previousRefreshToken)
        if span.isRecording {
            span.updateAttributes { attributes in
                attributes["oauth2.grant_type"] = parameters.first { $0.0 == "grant_type" }?.1 ?? "unknown"
                attributes["oauth2.outcome"] = outcome.traceName
                attributes["server.address"] = URLParts(settings.tokenEndpoint)?.host
            }
            if case .token = outcome {} else { span.setStatus(SpanStatus(code: .error)) }
        }
        return outcome
    }

    private func exchange(_ parameters: [(String, String)], previousRefreshToken: String?) async -> TokenEndpointOutcome {
        let response: UpstreamResponse
        do {
            response = try await transport.send(formRequest(settings.tokenEndpoint, parameters))
        } catch let error as TransportError where error.code == .invalidResponse {
            return .malformed(reason: "the token endpoint's answer is not usable HTTP")
        } catch let error as TransportError where !error.mayHaveReachedPeer {
            return .transient(retryAfter: nil)
        } catch let error as TransportError {
            // Sent, perhaps acted on, and the answer lost (a timeout, a reset).
            return .uncertain(retryAfter: nil, reason: error.description)
        } catch {
            return .uncertain(retryAfter: nil, reason: "the call ended before an answer (\(type(of: error)))")
        }
        let bytes: [UInt8]
        do {
            bytes = try await response.body.collect(upTo: TokenResponse.maxBodyBytes)
        } catch let error as TransportError where error.code == .bodyTooLarge {
            return .malformed(reason: "the token endpoint's answer is larger than Parley accepts")
        } catch {
            // The head came: the server has acted on the request, and its body broke off.
            return .uncertain(retryAfter: nil, reason: "the token endpoint's answer broke off after HTTP \(response.status) (\(error))")
        }
        return TokenResponse.parse(
            status: response.status, retryAfter: response.headers["Retry-After"], body: bytes, now: clock.now,
            previousRefreshToken: previousRefreshToken)
    }

    /// RFC 7009: revokes one token; true when the server accepted the request.
    public func revoke(_ token: String, hint: String) async -> Bool {
        guard let endpoint = settings.revocationEndpoint else { return false }
        guard let response = try? await transport.send(formRequest(endpoint, [("token", token), ("token_type_hint", hint)])) else {
            return false
        }
        response.body.discard()
        return response.status == 200
    }

    func formRequest(_ url: String, _ parameters: [(String, String)]) -> UpstreamRequest {
        var parameters = parameters
        var headers: HeaderFields = ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"]
        if let secret = settings.clientSecret, settings.clientAuthentication == .basic {
            let pair = PercentEncoding.encodeFormComponent(settings.clientID) + ":" + PercentEncoding.encodeFormComponent(secret)
            headers.set("Authorization", "Basic " + Base64.encode(Array(pair.utf8)))
        } else {
            parameters.append(("client_id", settings.clientID))
            if let secret = settings.clientSecret { parameters.append(("client_secret", secret)) }
        }
        return UpstreamRequest(
            method: "POST", url: url, headers: headers, body: .bytes(Array(PercentEncoding.encodeForm(parameters).utf8)), tls: tls,
            timeouts: Timeouts(connect: .seconds(5), total: .seconds(30), idle: .seconds(15)))
    }

    /// Error codes are echoed into logs and problems: keep them to RFC 6749's alphabet.
    public static func safeErrorCode(_ code: String) -> String { TokenResponse.safeErrorCode(code) }
}

/// PKCE (RFC 7636) with S256.
public enum PKCE {
    public static func verifier() -> String { SecureRandom.token(byteCount: 32) }
    public static func challenge(for verifier: String) -> String { Base64URL.encode(SHA256.hash(Array(verifier.utf8))) }
}

extension TokenEndpointOutcome {
    /// The outcome's kind for a span attribute (no token, no error text from the server).
    var traceName: String {
        switch self {
        case .token: "token"
        case .invalidGrant: "invalid_grant"
        case .refused: "refused"
        case .malformed: "malformed"
        case .transient: "transient"
        case .uncertain: "uncertain"
        }
    }
}
