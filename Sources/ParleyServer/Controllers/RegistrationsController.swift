import Foundation
import HTTPTypes
import Hummingbird
import ParleyDomain

/// Who may try to register now: every attempt counts, refused ones too, per client address
/// (the balancer's `X-Forwarded-For` only from a trusted proxy).
struct RegistrationAdmission: RouterMiddleware {
    typealias Context = ParleyRequestContext
    let limits: RateLimits

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let client = limits.client(of: request, peer: context.peerAddress)
        try limits.check(limits.registrations, client, kind: "registration")
        return try await next(request, context)
    }
}

/// `POST /v1/registrations` (anyone), `GET|DELETE /v1/registrations/me` and
/// `PUT /v1/registrations/me/identity` (the registration itself).
struct RegistrationsController: Sendable {
    let service: RegistrationService
    let maxJSONBytes: Int
    /// Browser apps' sessions: a `"browser": true` registration's client token is a cookie.
    var session: BrowserSession? = nil

    @Sendable func create(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        let input = try await JSONBody.decode(CreateRegistration.self, from: request, limit: maxJSONBytes)
        let browser = input.browser == true
        // A browser app's registration is made by its page's script, never by a form of another
        // site: the custom header needs a CORS preflight, which only the apps' origins pass.
        if browser, !BrowserSession.sentByScript(request) { throw BrowserSession.refused }
        let created = try await service.register(
            input, enrolmentSecret: request.headers[HTTPField.Name("Parley-Enrolment")!], origin: request.headers[.origin], logger: context.logger)
        var response = try JSONBody.response(
            .created,
            RegistrationView(
                created.record, appcid: try service.appcid(of: created.record), flow: created.flow,
                clientToken: created.record.browserApp == nil ? created.clientToken : nil))
        if created.record.browserApp != nil, let session {
            // The token goes where no script can read it; the answer carries none.
            response.headers.append(HTTPField(name: .setCookie, value: session.setCookie(token: created.clientToken)))
        }
        // Where the new registration is read (RFC 9110 §15.3.2), relative to this request's
        // URI, so that it holds under any public path.
        response.headers[.location] = "registrations/me"
        return response
    }

    /// `GET /v1/registrations/me?wait=S`: with `wait`, as soon as the status changes (at most 60 s).
    @Sendable func me(_ request: Request, context: ClientRequestContext) async throws -> Response {
        var record = context.registration
        let wait = LongPoll.seconds(request.waitParameter)
        if wait > 0 { record = try await service.awaitChange(of: record, seconds: wait) }
        return try JSONBody.response(
            .ok, RegistrationView(record, appcid: try service.appcid(of: record), flow: try await service.pendingFlow(of: record)))
    }

    /// `PUT /v1/registrations/me/identity` input.
    struct RenewIdentity: Decodable {
        var identityToken: String
    }

    /// `PUT /v1/registrations/me/identity`: a fresh identity token of the same user; answers the registration.
    @Sendable func renewIdentity(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let input = try await JSONBody.decode(RenewIdentity.self, from: request, limit: maxJSONBytes)
        let record = context.registration
        try await service.renewIdentity(record, token: input.identityToken, logger: context.logger)
        return try JSONBody.response(
            .ok, RegistrationView(record, appcid: try service.appcid(of: record), flow: try await service.pendingFlow(of: record)))
    }

    @Sendable func delete(_ request: Request, context: ClientRequestContext) async throws -> Response {
        try await service.deregister(context.registration, actor: .client, logger: context.logger)
        var response = Response(status: .noContent)
        if context.registration.browserApp != nil, let session {
            response.headers.append(HTTPField(name: .setCookie, value: session.expiringCookie))
        }
        return response
    }
}

