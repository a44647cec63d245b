import HTTPTypes
import Hummingbird

/// `POST /v1/registrations` (anyone), `GET|DELETE /v1/registrations/me` (the registration itself).
struct RegistrationsController: Sendable {
    let service: RegistrationService
    let limits: RateLimits
    let maxJSONBytes: Int

    @Sendable func create(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        // Every attempt counts, refused ones too: the limit is per client address.
        let client = limits.clientAddress(peer: context.peerAddress, forwardedFor: request.headers[HTTPField.Name("X-Forwarded-For")!])
        try limits.check(limits.registrations, client, kind: "registration")
        let input = try await JSONBody.decode(CreateRegistration.self, from: request, limit: maxJSONBytes)
        let created = try await service.register(
            input, enrolmentSecret: request.headers[HTTPField.Name("Parley-Enrolment")!], logger: context.logger)
        return JSONBody.response(.created, try service.view(created.record, clientToken: created.clientToken, flow: created.flow))
    }

    @Sendable func me(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let record = context.registration
        return JSONBody.response(.ok, try service.view(record, flow: try await service.pendingFlow(of: record)))
    }

    @Sendable func delete(_ request: Request, context: ClientRequestContext) async throws -> Response {
        try await service.deregister(context.registration, actor: .client, logger: context.logger)
        return Response(status: .noContent)
    }
}
