import AuthFlows
import Foundation
import Hummingbird
import ParleyEncoding
import ParleyDomain

/// `POST /backchannel-logout` (OpenID Connect Back-Channel Logout 1.0): a listed identity
/// provider says a user's sessions ended. The `logout_token` (a form field) must verify
/// (`IdentityTokenVerifier.verifyLogoutToken`) and be new (its `jti`); then the user is revoked
/// everywhere, not-before included (`Administration.endSessions`). Anything else is
/// `400 invalid_request` and changes nothing. No authentication but the token's signature.
struct BackChannelLogoutController: Sendable {
    /// A logout token is a few kilobytes; the form around it is no larger than the token may be.
    static let maxBodyBytes = IdentityTokenVerifier.maxTokenBytes + 1024

    let verifier: IdentityTokenVerifier
    let administration: Administration

    @Sendable func logout(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/x-www-form-urlencoded" else {
            throw Problem.invalid("the logout token comes as a form (application/x-www-form-urlencoded) with a logout_token field")
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Self.maxBodyBytes)
        } catch {
            throw Problem.invalid("the form is larger than a logout token may be")
        }
        guard let fields = PercentEncoding.decodeForm(String(buffer: body)) else { throw Problem.invalid("the form could not be read") }
        let tokens = fields.filter { $0.0 == "logout_token" }.map(\.1)
        guard tokens.count == 1, let token = tokens.first else { throw Problem.invalid("the form must carry one logout_token") }
        let verified: (identity: VerifiedIdentity, jti: String)
        do {
            verified = try await verifier.verifyLogoutToken(token)
        } catch {
            context.logger.info("back-channel logout refused", metadata: ["identity.check": .string(error.check.rawValue)])
            throw Problem.invalid("the logout token was refused: " + error.detail)
        }
        let identity = verified.identity
        guard
            try await administration.endSessions(
                of: UserReference(issuer: identity.issuer, subject: identity.subject), logoutToken: verified.jti,
                expiresAt: identity.expiresAt ?? Date(), logger: context.logger) != nil
        else {
            context.logger.info("back-channel logout refused", metadata: ["identity.check": "replayed"])
            throw Problem.invalid("the logout token was refused: this token (its jti) was used before")
        }
        return Response(status: .ok, headers: [.cacheControl: "no-store"])
    }
}
