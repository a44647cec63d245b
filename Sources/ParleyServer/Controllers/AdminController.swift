import Foundation
import Hummingbird

/// `/admin/v1/…`: administrators (admin token). Every call is audited.
struct AdminController: Sendable {
    let registrations: any RegistrationRepository
    let service: RegistrationService
    let audit: AuditLog

    /// `GET /admin/v1/registrations/{id}`: the registration shape, without the APPCID.
    @Sendable func registration(_ request: Request, context: AdminRequestContext) async throws -> Response {
        guard let id = UUID(uuidString: context.parameters.get("id") ?? ""), let record = try await registrations.find(id: id) else {
            throw Problem.notFound("no such registration")
        }
        await audit.record(
            "admin.registration.read", actor: .admin, registrationID: record.id, destination: record.destination,
            detail: ["admin": context.admin.name])
        return JSONBody.response(.ok, try service.view(record, flow: try await service.pendingFlow(of: record), showAppcid: false))
    }
}
