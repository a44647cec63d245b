import Conversation
import HTTPTypes
import Hummingbird
import NIOCore
import ParleyDomain

/// The upstream's final answer as an HTTP response, for the proxy and the hosted upstream:
/// end-to-end headers only (`ProxyRules.returnable`), the body read at once when small and
/// streamed otherwise.
enum UpstreamAnswer {
    /// Bodies up to this size are read before the answer starts, so the head and the body
    /// leave in one write (most API answers); larger ones stream.
    static let smallBodyBytes = 64 * 1024

    /// The upstream's final answer for the client. A status outside 100–599 is the
    /// upstream's nonsense: `502`, and the process goes on. `ticket` (the request's in-flight
    /// slot) is held until the body is written (or the response is dropped).
    static func response(
        from upstream: UpstreamResponse, csrf: Bool, isHead: Bool, ticket: InFlightTicket? = nil
    ) async throws(Problem) -> Response {
        guard (100...599).contains(upstream.status) else {
            upstream.body.discard()
            throw Problem(.badGateway, .upstreamUnavailable, "the upstream answered with an invalid status")
        }
        var headers = HTTPFields()
        for (name, value) in ProxyRules.returnable(upstream.headers, csrf: csrf) {
            if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
        }
        let length = upstream.headers["Content-Length"].flatMap(Int.init)
        let body = upstream.body
        let status = HTTPResponse.Status(code: upstream.status)
        if isHead || upstream.status == 204 || upstream.status == 304 {
            body.discard()
            if let length, isHead { headers[.contentLength] = String(length) }
            return Response(status: status, headers: headers, body: ResponseBody())
        }
        if let length, length <= smallBodyBytes {
            let bytes: [UInt8]
            do {
                bytes = try await body.collect(upTo: length)
            } catch {
                body.discard()
                throw Problem(.badGateway, .upstreamUnavailable, "the upstream's answer ended before its announced length")
            }
            ticket?.release()
            guard bytes.count == length else {
                throw Problem(.badGateway, .upstreamUnavailable, "the upstream's answer ended before its announced length")
            }
            return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
        }
        return Response(
            status: status, headers: headers,
            body: ResponseBody(contentLength: length) { writer in
                defer {
                    body.discard()
                    ticket?.release()
                }
                for try await chunk in body {
                    try await writer.write(ByteBuffer(bytes: chunk))
                }
                try await writer.finish(nil)
            })
    }
}
