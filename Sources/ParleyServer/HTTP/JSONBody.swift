import Foundation
import Hummingbird
import NIOCore
import ParleyDomain

/// JSON in and out of the Parley API.
enum JSONBody {
    /// Reads a JSON body of at most `limit` bytes and decodes it; `400`/`413` otherwise.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int) async throws -> T {
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

    static func response(_ status: HTTPResponse.Status, _ value: JSONValue) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: value.encoded())))
    }

    /// A typed answer, written by the one JSON writer (`JSONValueEncoder`).
    static func response(_ status: HTTPResponse.Status, _ value: some Encodable) throws -> Response {
        response(status, try JSONValueEncoder().encode(value))
    }
}
