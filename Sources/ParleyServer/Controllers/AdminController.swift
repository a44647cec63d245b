import Foundation
import Hummingbird

/// `/admin/v1/…`: administrators (admin token). Every call is audited.
struct AdminController: Sendable {
    let administration: Administration
    let service: RegistrationService
    let maxJSONBytes: Int

    /// `GET /admin/v1/registrations?destination=&userHint=&limit=&cursor=`
    @Sendable func registrations(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let page = try await administration.list(
            destination: try Problem.checkedText(query.get("destination"), "destination"),
            userHint: try Problem.checkedText(query.get("userHint"), "userHint"), limit: try Administration.limit(query.get("limit")),
            cursor: try Problem.checkedText(query.get("cursor"), "cursor"), admin: context.admin)
        return JSONBody.response(.ok, page)
    }

    /// `GET /admin/v1/registrations/{id}`: the registration shape (without the APPCID) and token metadata.
    @Sendable func registration(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let record = try await administration.registration(id: context.parameters.get("id"))
        return JSONBody.response(.ok, try await administration.detail(record, admin: context.admin))
    }

    /// `DELETE /admin/v1/registrations/{id}`: full teardown, as the client's own DELETE.
    @Sendable func delete(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let record = try await administration.registration(id: context.parameters.get("id"))
        try await service.deregister(record, actor: .admin, logger: context.logger)
        return Response(status: .noContent)
    }

    /// `POST /admin/v1/registrations/{id}/approval`
    @Sendable func approve(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let record = try await administration.registration(id: context.parameters.get("id"))
        let approved = try await service.approve(record, admin: context.admin, logger: context.logger)
        return JSONBody.response(.ok, try service.view(approved.record, flow: approved.flow, showAppcid: false))
    }

    /// `POST /admin/v1/revocations`
    @Sendable func revoke(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let input = try await JSONBody.decode(RevocationRequest.self, from: request, limit: maxJSONBytes)
        return JSONBody.response(.ok, try await administration.revoke(input, admin: context.admin, logger: context.logger))
    }

    /// `GET /admin/v1/audit?since=&limit=&cursor=`
    @Sendable func auditEvents(_ request: Request, context: AdminRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let page = try await administration.auditPage(
            since: try Problem.checkedText(query.get("since"), "since"), limit: try Administration.limit(query.get("limit")),
            cursor: try Problem.checkedText(query.get("cursor"), "cursor"), admin: context.admin)
        return JSONBody.response(.ok, page)
    }
}
