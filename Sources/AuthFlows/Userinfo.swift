import Conversation
import Foundation

/// What an OpenID Connect userinfo endpoint said about who an access token is for (OIDC Core
/// §5.3), triaged. The answer is the authorization server's and may be anything: only a JSON
/// object with a usable string `sub` names someone.
public enum UserinfoOutcome: Sendable, Equatable {
    case subject(String)
    /// Not a usable answer (another status, not a JSON object, no usable `sub`, too large).
    case malformed(reason: String)
    /// Network failure, 5xx or 429: nobody can tell now.
    case transient
}

public enum Userinfo {
    /// Bytes read from a userinfo endpoint at most; a larger answer is `malformed`.
    public static let maxBodyBytes = 64 * 1024
    /// A `sub` longer than this is not one Parley keeps (OIDC allows 255 ASCII characters).
    public static let maxSubjectBytes = 1024

    /// The `sub` of a userinfo answer's body: a JSON object whose `sub` is a string of 1 to
    /// `maxSubjectBytes` bytes without control characters; nil otherwise.
    public static func subject(from body: [UInt8]) -> String? {
        guard body.count <= maxBodyBytes, let wire = try? JSONDecoder().decode(Wire.self, from: Data(body)), let sub = wire.sub else {
            return nil
        }
        let bytes = sub.utf8
        guard !bytes.isEmpty, bytes.count <= maxSubjectBytes, !sub.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { return nil }
        return sub
    }

    /// The members Parley reads; any other member is ignored, a `sub` of another type is absent.
    private struct Wire: Decodable {
        let sub: String?

        enum CodingKeys: String, CodingKey { case sub }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            sub = (try? container.decodeIfPresent(String.self, forKey: .sub)) ?? nil
        }
    }
}

extension TokenEndpointClient {
    /// `GET userinfoEndpoint` with the access token (RFC 6750 §2.1), over the token endpoint's
    /// transport, TLS options and limits. The token never appears in an outcome.
    public func userinfo(accessToken: String) async -> UserinfoOutcome {
        guard let endpoint = settings.userinfoEndpoint else { return .malformed(reason: "the destination has no userinfoEndpoint") }
        let request = UpstreamRequest(
            method: "GET", url: endpoint, headers: ["Authorization": "Bearer " + accessToken, "Accept": "application/json"], tls: tls,
            timeouts: Timeouts(connect: .seconds(5), total: .seconds(30), idle: .seconds(15)))
        let response: UpstreamResponse
        do {
            response = try await transport.send(request)
        } catch let error as TransportError where error.code == .invalidResponse {
            return .malformed(reason: "the userinfo endpoint's answer is not usable HTTP")
        } catch {
            return .transient
        }
        switch response.status {
        case 200:
            break
        case 429, 500...599:
            response.body.discard()
            return .transient
        default:
            response.body.discard()
            return .malformed(reason: "the userinfo endpoint answered HTTP \(response.status)")
        }
        let bytes: [UInt8]
        do {
            bytes = try await response.body.collect(upTo: Userinfo.maxBodyBytes)
        } catch let error as TransportError where error.code == .bodyTooLarge {
            return .malformed(reason: "the userinfo endpoint's answer is larger than Parley accepts")
        } catch {
            return .transient
        }
        guard let subject = Userinfo.subject(from: bytes) else {
            return .malformed(reason: "the userinfo endpoint's answer is not a JSON object with a usable string 'sub'")
        }
        return .subject(subject)
    }
}
