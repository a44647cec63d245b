import AuthFlows
import Conversation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// `ANY /v1/proxy/{path…}`: the request goes through the registration's conversation
/// manager; the final upstream response streams back with end-to-end headers only.
/// The path rules judge the raw request target, encoded segments included.
struct ProxyController: Sendable {
    /// What the proxy forwards. `TRACE` and `CONNECT` are refused (405), as is any
    /// method not listed (WebDAV's, say); `MERGE` is OData's update.
    static let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete, .options, .init("MERGE")!]
    static let prefix = "/v1/proxy"

    let conversations: Conversations
    let flows: FlowService
    let metrics: Metrics
    let limits: RateLimits
    let inFlight: InFlightLimits
    let memoryBodyBytes: Int
    let spool: Spool

    @Sendable func forward(_ request: Request, context: ClientRequestContext) async throws -> Response {
        let registration = try context.approvedRegistration()
        try limits.check(limits.proxy, registration.idString, kind: "proxy")
        let destination = try conversations.destination(of: registration)
        let checksCredentials = destination.oauth2?.grant == .password || (destination.basic != nil && registration.credentialsSealed != nil)
        if checksCredentials { try limits.checkLoginAllowed(registration: registration.id, userHint: registration.userHint) }
        guard let (rawPath, rawQuery) = Self.splitProxyTarget(request.uri.string) else {
            throw Problem.invalid("the proxy path must start with /v1/proxy/")
        }
        let url = try ProxyRules.upstreamURL(destination: destination, rawPath: rawPath, rawQuery: rawQuery)

        let limit = destination.requestBodyLimit
        let declared = request.headers[.contentLength].flatMap(Int64.init)
        if let declared, declared > limit {
            throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
        }
        let ticket: InFlightTicket
        do { ticket = try inFlight.admit(registration.id) } catch {
            metrics.increment(.rateLimited, [("limit", "in_flight")])
            throw error
        }
        let manager = try conversations.manager(for: registration)
        let headers = ProxyRules.forwardable(request.headers.map { ($0.name.rawName, $0.value) })
        func exchange(_ spooled: SpooledBody) async -> Result<ConversationResult, any Error> {
            do {
                return .success(
                    try await manager.execute(UpstreamRequest(method: request.method.rawValue, url: url, headers: headers, body: spooled.body)))
            } catch {
                return .failure(error)
            }
        }
        let started: ContinuousClock.Instant
        let outcome: Result<ConversationResult, any Error>
        let spooled: SpooledBody
        if let declared, declared > Int64(memoryBodyBytes) {
            // Too large for memory and of known length: the exchange sends the body while
            // it is still arriving (and spooled for a replay).
            let streaming = try await StreamingSpool.start(length: declared, spool: spool)
            spooled = streaming.spooled
            let body = request.body
            started = .now
            async let filled: Void = streaming.run(body)
            outcome = await exchange(spooled)
            // The client's body first: when it broke off, that explains the exchange's failure.
            do { try await filled } catch {
                spooled.remove()
                if case .success(.response(let upstream)) = outcome { upstream.body.discard() }
                throw error
            }
        } else {
            spooled = try await SpooledBody.read(request.body, limit: limit, memoryLimit: memoryBodyBytes, spool: spool)
            started = .now
            outcome = await exchange(spooled)
        }
        let result: ConversationResult
        switch outcome {
        case .success(let answer):
            result = answer
        case .failure(let error):
            spooled.remove()
            if let problem = error as? Problem { throw problem }
            if let refused = error as? OAuth2Error, refused.code == .refused {
                limits.recordFailedLogin(registration: registration.id, userHint: registration.userHint)
            }
            metrics.increment(.upstreamErrors, [("destination", destination.name), ("kind", Problem.from(error).code.rawValue)])
            throw error
        }
        // The conversation is over: no restart can replay the body any more.
        spooled.remove()

        switch result {
        case .interactionRequired(let interaction):
            throw try await flows.interactionRequired(interaction, registration: registration)
        case .response(let upstream):
            if checksCredentials && upstream.status == 401 && destination.basic != nil {
                limits.recordFailedLogin(registration: registration.id, userHint: registration.userHint)
            }
            metrics.increment(.upstreamResponses, [("destination", destination.name), ("status", Metrics.statusClass(upstream.status))])
            metrics.observeUpstream(destination: destination.name, duration: ContinuousClock.now - started)
            return try await Self.response(from: upstream, csrf: destination.csrfEnabled, isHead: request.method == .head, ticket: ticket)
        }
    }

    /// The upstream's final answer for the client. A status outside 100–599 is the
    /// upstream's nonsense: `502`, and the process goes on.
    /// Bodies up to this size are read before the answer starts, so the head and the body
    /// leave in one write (most API answers); larger ones stream.
    static let smallBodyBytes = 64 * 1024

    /// `ticket` is held until the body is written (or the response is dropped).
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
        if let length, length <= Self.smallBodyBytes {
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

    /// Splits the raw request target into the path after `/v1/proxy/` and the raw query;
    /// nil when the target does not start with `/v1/proxy` exactly (`//v1/proxy`, absolute form).
    static func splitProxyTarget(_ target: String) -> (path: String, query: String?)? {
        var pathPart = Substring(target)
        var query: String?
        if let q = target.firstIndex(of: "?") {
            pathPart = target[..<q]
            query = String(target[target.index(after: q)...])
        }
        guard pathPart.hasPrefix(prefix) else { return nil }
        var rest = pathPart.dropFirst(prefix.count)
        guard rest.isEmpty || rest.hasPrefix("/") else { return nil }
        if rest.hasPrefix("/") { rest = rest.dropFirst() }
        return (String(rest), query)
    }
}
