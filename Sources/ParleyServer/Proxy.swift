import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

extension Parley {
    /// `ANY /v1/proxy/{path…}`: the request goes through the registration's conversation
    /// manager; the final upstream response streams back with end-to-end headers only.
    func proxy(_ request: Request, context: some RequestContext) async throws -> Response {
        let registration = try await authenticate(authorization: request.headers[.authorization], cached: true)
        guard let destination = configuration.destinations[registration.destination] else {
            throw Problem.invalid("the registration's destination is no longer configured")
        }
        let (rawPath, rawQuery) = Self.splitProxyTarget(request.uri.string)
        let url = try ProxyRules.upstreamURL(destination: destination, rawPath: rawPath, rawQuery: rawQuery)

        let limit = destination.requestBodyLimit
        if let declared = request.headers[.contentLength].flatMap(Int64.init), declared > limit {
            throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
        }
        let manager = try manager(for: registration)
        let spooled = try await SpooledBody.read(
            request.body, limit: limit, memoryLimit: configuration.memoryBodyBytes, directory: configuration.spoolDirectory)
        let result: ConversationResult
        do {
            let headers = ProxyRules.forwardable(request.headers.map { ($0.name.rawName, $0.value) })
            result = try await manager.execute(
                UpstreamRequest(method: request.method.rawValue, url: url, headers: headers, body: spooled.body))
        } catch {
            spooled.remove()
            if let problem = error as? Problem { throw problem }
            metrics.increment("parley_upstream_errors_total", [("destination", destination.name), ("kind", Problem.from(error).code.rawValue)])
            throw error
        }
        // The conversation is over: no restart can replay the body any more. libcurl
        // read the spool file through its own descriptor, so unlinking it now is safe.
        spooled.remove()

        switch result {
        case .interactionRequired(let interaction):
            throw try await interactionRequired(interaction, registration: registration)
        case .response(let upstream):
            metrics.increment("parley_upstream_responses_total", [("destination", destination.name), ("status", Metrics.statusClass(upstream.status))])
            var headers = HTTPFields()
            for (name, value) in ProxyRules.returnable(upstream.headers, csrf: destination.csrfEnabled) {
                if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
            }
            let length = upstream.headers["Content-Length"].flatMap(Int.init)
            let body = upstream.body
            let isHead = request.method == .head
            let status = HTTPResponse.Status(code: upstream.status)
            if isHead || upstream.status == 204 || upstream.status == 304 {
                body.discard()
                if let length, isHead { headers[.contentLength] = String(length) }
                return Response(status: status, headers: headers, body: ResponseBody())
            }
            return Response(
                status: status, headers: headers,
                body: ResponseBody(contentLength: length) { writer in
                    defer { body.discard() }
                    for try await chunk in body {
                        try await writer.write(ByteBuffer(bytes: chunk))
                    }
                    try await writer.finish(nil)
                })
        }
    }

    /// Splits the raw request target into the path after `/v1/proxy/` and the raw query.
    static func splitProxyTarget(_ target: String) -> (path: String, query: String?) {
        var pathPart = Substring(target)
        var query: String?
        if let q = target.firstIndex(of: "?") {
            pathPart = target[..<q]
            query = String(target[target.index(after: q)...])
        }
        let prefix = "/v1/proxy"
        var rest = pathPart.dropFirst(prefix.count)
        if rest.hasPrefix("/") { rest = rest.dropFirst() }
        return (String(rest), query)
    }
}
