import Foundation
public import Hummingbird
import Logging
import NIOCore
import Store
import AuthFlows

extension Parley {
    /// The router with every route of the contract that this instance serves.
    public func makeRouter() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: ParleyMiddleware(metrics: metrics))
        router.add(middleware: ProxyMiddleware(parley: self))

        router.get("/healthz") { _, _ in Self.json(.ok, .object(["status": .string("ok")])) }
        router.get("/readyz") { _, _ in
            let ready = await self.isReady()
            if ready { return Self.json(.ok, .object(["status": .string("ready")])) }
            return Problem.storeUnavailable().render()
        }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: .init(byteBuffer: ByteBuffer(string: self.metrics.render())))
        }

        router.post("/v1/registrations") { request, context in
            let input = try await self.decode(CreateRegistration.self, from: request)
            let (record, token, flow) = try await self.register(input, logger: context.logger)
            return Self.json(.created, try self.registrationJSON(record, clientToken: token, flow: flow))
        }
        router.get("/v1/registrations/me") { request, _ in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            return Self.json(.ok, try self.registrationJSON(record, flow: try await self.registrationFlow(record)))
        }
        router.delete("/v1/registrations/me") { request, context in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            try await self.deregister(record, actor: .client, logger: context.logger)
            return Response(status: .noContent)
        }

        router.post("/v1/flows") { request, _ in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            let input = try await self.decode(StartFlow.self, from: request)
            return Self.json(.created, try await self.startFlow(kind: input.kind, registration: record))
        }
        router.get("/v1/flows/{id}") { request, context in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            let id = context.parameters.get("id") ?? ""
            return Self.json(.ok, try await self.flowStatus(id: id, wait: request.uri.queryParameters.get("wait"), registration: record))
        }
        router.get("/flows/{id}") { request, context in
            try await self.page { try await self.flowStartPage(id: context.parameters.get("id") ?? "", secret: request.uri.queryParameters.get("k")) }
        }
        router.get("/flows/{id}/done") { _, context in
            try await self.page { try await self.flowDonePage(id: context.parameters.get("id") ?? "") }
        }
        router.get("/callback/oauth2") { request, context in
            try await self.page { try await self.oauth2Callback(query: FormEncoding.decode(request.uri.query ?? "") ?? [], logger: context.logger) }
        }
        return router
    }

    /// Browser pages answer failures as HTML, not problem+json.
    func page(_ body: () async throws -> Response) async throws -> Response {
        do { return try await body() } catch { return Page.problem(Problem.from(error)) }
    }

    /// The pending flow a `login_required` registration waits on.
    func registrationFlow(_ record: RegistrationRecord) async throws -> JSONValue? {
        guard record.status == "login_required", let flow = try await flows.latest(registrationID: record.id, purpose: "smp_registration") else {
            return nil
        }
        return flowJSON(flow)
    }

    struct StartFlow: Decodable { var kind: String? }

    func isReady() async -> Bool {
        guard let directory = configuration.migrationsDirectory ?? Migrator.locateDirectory() else { return false }
        return await store.isReady(migrationsDirectory: directory)
    }

    /// Reads a JSON body of at most `PARLEY_MAX_JSON_BYTES` and decodes it.
    func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        let limit = configuration.maxJSONBytes
        if let declared = request.headers[.contentLength].flatMap(Int.init), declared > limit {
            throw Problem(.contentTooLarge, .payloadTooLarge, "JSON bodies are limited to \(limit) bytes")
        }
        var collected = ByteBuffer()
        for try await chunk in request.body {
            guard collected.readableBytes + chunk.readableBytes <= limit else {
                throw Problem(.contentTooLarge, .payloadTooLarge, "JSON bodies are limited to \(limit) bytes")
            }
            var chunk = chunk
            collected.writeBuffer(&chunk)
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(collected.readableBytesView))
        } catch let error as DecodingError {
            throw Problem.invalid("the JSON body is not acceptable: \(DestinationsFile.describe(error))")
        }
    }

    static func json(_ status: HTTPResponse.Status, _ value: JSONValue) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: value.encoded())))
    }
}
