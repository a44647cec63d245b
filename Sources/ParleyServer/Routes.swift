import Foundation
public import Hummingbird
import Logging
import NIOCore
import Store

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
            let (record, token) = try await self.register(input, logger: context.logger)
            return Self.json(.created, try self.registrationJSON(record, clientToken: token))
        }
        router.get("/v1/registrations/me") { request, _ in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            return Self.json(.ok, try self.registrationJSON(record))
        }
        router.delete("/v1/registrations/me") { request, context in
            let record = try await self.authenticate(authorization: request.headers[.authorization])
            try await self.deregister(record, actor: .client, logger: context.logger)
            return Response(status: .noContent)
        }
        return router
    }

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
