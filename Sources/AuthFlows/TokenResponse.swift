public import Foundation

/// What a token endpoint said (RFC 6749 §5), triaged. Every byte of the answer is the
/// authorization server's and may be nonsense: parsing never traps, and only a complete,
/// plausible answer becomes a token.
public enum TokenEndpointOutcome: Sendable, Equatable {
    case token(StoredToken)
    /// `invalid_grant`: the refresh token or code is dead; only this deletes a stored token.
    case invalidGrant
    /// Another OAuth2 error (`invalid_client`, `unauthorized_client`, …): Parley's own
    /// setup is refused. Stored tokens stay.
    case refused(error: String)
    /// An answer that is not a usable token response (not JSON, wrong `token_type`,
    /// missing or absurd `expires_in`, a WAF's HTML page): `502`, stored tokens stay.
    case malformed(reason: String)
    /// The request did not reach the authorization server (no connection), or the server said it
    /// could not take it now (429, 503): keep what is stored and back off.
    case transient(retryAfter: Duration?)
    /// The request may have reached the authorization server and been acted on, but its answer was
    /// lost: a timeout or a broken connection after sending, a broken body after the head, another
    /// 5xx (a gateway's 502 or 504 says nothing of what the server behind it did). A refresh token
    /// it carried must be taken as spent; otherwise like `transient`.
    case uncertain(retryAfter: Duration?, reason: String)
}

public enum TokenResponse {
    /// Bytes read from a token endpoint at most; a larger answer is `malformed`.
    public static let maxBodyBytes = 256 * 1024
    /// A token (access or refresh) longer than this is not one Parley will store.
    public static let maxTokenBytes = 16 * 1024
    /// Ten years: an `expires_in` beyond this is nonsense, not a long-lived token.
    public static let maxLifetimeSeconds = 315_360_000

    public static func parse(
        status: Int, retryAfter: String?, body: [UInt8], now: Date, previousRefreshToken: String?
    ) -> TokenEndpointOutcome {
        switch status {
        case 200:
            return token(body, now: now, previousRefreshToken: previousRefreshToken)
        case 429, 503:
            return .transient(retryAfter: Self.retryAfter(retryAfter))
        case 500...599:
            return .uncertain(retryAfter: Self.retryAfter(retryAfter), reason: "the token endpoint answered HTTP \(status)")
        case 400...499:
            guard let wire = try? JSONDecoder().decode(WireError.self, from: Data(body)), let raw = wire.error else {
                return .malformed(reason: "the token endpoint answered HTTP \(status) without an OAuth2 error")
            }
            let code = safeErrorCode(raw)
            if code == "invalid_grant" { return .invalidGrant }
            return .refused(error: code.isEmpty ? "http_\(status)" : code)
        default:
            return .malformed(reason: "the token endpoint answered HTTP \(status)")
        }
    }

    static func token(_ body: [UInt8], now: Date, previousRefreshToken: String?) -> TokenEndpointOutcome {
        let wire: WireToken
        do {
            wire = try JSONDecoder().decode(WireToken.self, from: Data(body))
        } catch {
            return .malformed(reason: "the token endpoint's answer is not a token response")
        }
        guard let access = wire.access_token, isTokenText(access) else {
            return .malformed(reason: "the token endpoint's answer has no usable access_token")
        }
        guard let type = wire.token_type, type.lowercased() == "bearer" else {
            return .malformed(reason: "the token endpoint's answer is not a Bearer token")
        }
        guard let lifetime = wire.expires_in?.value, (1...maxLifetimeSeconds).contains(lifetime) else {
            return .malformed(reason: "the token endpoint's expires_in is missing or not a whole number of seconds in range")
        }
        var refresh = previousRefreshToken
        if let issued = wire.refresh_token {
            guard isTokenText(issued) else { return .malformed(reason: "the token endpoint's refresh_token is not usable") }
            refresh = issued
        }
        if let scope = wire.scope, scope.utf8.count > 4096 || !scope.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            return .malformed(reason: "the token endpoint's scope is not usable")
        }
        // OpenID Connect: kept as sent for the caller that checks it; one that is not a string of
        // token characters within IdentityTokenVerifier's size is no id_token at all.
        let idToken = wire.id_token?.value.flatMap { isTokenText($0) ? $0 : nil }
        return .token(
            StoredToken(
                accessToken: access, refreshToken: refresh, tokenType: "Bearer", scopes: wire.scope,
                expiresAt: now.addingTimeInterval(TimeInterval(lifetime)), idToken: idToken))
    }

    /// RFC 6749 Appendix A: `1*VSCHAR`, and not larger than Parley stores.
    static func isTokenText(_ text: String) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= maxTokenBytes && bytes.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }

    static func retryAfter(_ value: String?) -> Duration? {
        guard let value else { return nil }
        let digits = value.trimmingCharacters(in: .whitespaces)
        guard !digits.isEmpty, digits.utf8.count <= 9, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let seconds = Int(digits) else {
            return nil
        }
        return .seconds(min(seconds, 3600))
    }

    /// Error codes are echoed into logs and problems: keep them to RFC 6749's alphabet.
    public static func safeErrorCode(_ code: String) -> String {
        String(code.prefix(64).filter { $0.isASCII && ($0.isLetter || $0 == "_") })
    }

    private struct WireToken: Decodable {
        let access_token: String?
        let token_type: String?
        let expires_in: WholeSeconds?
        let refresh_token: String?
        let scope: String?
        let id_token: LenientText?
    }

    /// A string member read leniently: any other JSON value counts as absent instead of making
    /// the whole answer unusable (an `id_token` is read only where a destination asks for it).
    private struct LenientText: Decodable {
        let value: String?

        init(from decoder: any Decoder) throws {
            value = try? decoder.singleValueContainer().decode(String.self)
        }
    }

    private struct WireError: Decodable {
        let error: String?
    }

    /// A JSON integer, or a string of at most 12 digits (some servers quote it).
    /// Fractions, exponents beyond `Int`, negative strings and other types are refused.
    private struct WholeSeconds: Decodable {
        let value: Int

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(Int.self) {
                value = number
                return
            }
            let text = try container.decode(String.self)
            guard !text.isEmpty, text.utf8.count <= 12, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let number = Int(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a whole number of seconds")
            }
            value = number
        }
    }
}
