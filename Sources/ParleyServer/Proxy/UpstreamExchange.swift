import AuthFlows
import Conversation
import Hummingbird
import ParleyDomain

/// "Send this request through the registration's conversation and hand back the answer":
/// the one upstream exchange that the proxy (`/v1/proxy/…`) and the hosted upstream
/// (`/web/{destination}/…`) share. It splits the request target, applies the path and
/// header rules, keeps the body for replays (in memory, spooled, or sent upstream while it
/// is still being spooled), and runs the conversation. Failures are thrown as they are;
/// `Problem.from` is the one place that classifies them.
struct UpstreamExchange: Sendable {
    let spool: Spool
    /// Bodies up to this size stay in memory for a replay; larger ones are spooled.
    let memoryBodyBytes: Int

    /// A request as it goes upstream, before its body.
    struct Outgoing: Sendable {
        var method: String
        var url: String
        var headers: HeaderFields
    }

    /// The upstream request for a client request whose target starts with `prefix`: the URL
    /// below the destination's (path rules), and the end-to-end headers. `400` for a target
    /// that does not start with `prefix` or breaks a path rule.
    func outgoing(_ request: Request, prefix: String, destination: Destination) throws(Problem) -> Outgoing {
        guard let (rawPath, rawQuery) = RequestTarget.split(request.uri.string, prefix: prefix) else {
            throw Problem.invalid("the path must start with \(prefix)/")
        }
        let url = try ProxyRules.upstreamURL(destination: destination, rawPath: rawPath, rawQuery: rawQuery)
        return Outgoing(method: request.method.rawValue, url: url, headers: ProxyRules.forwardable(request.headers.map { ($0.name.rawName, $0.value) }))
    }

    /// Sends `outgoing` with the client's `body` (at most `limit` bytes, `413` beyond)
    /// through `manager`. The body is kept until the conversation is over, so a restart
    /// (a challenge, a renewed token, a CSRF retry) can send it again. With `afterSignIn`, a
    /// conversation that needs a person waits for it there: when it hands back a manager (the
    /// sign-in completed), the request is sent again through it, with the same body.
    func send(
        _ outgoing: Outgoing, body: RequestBody, declaredLength: Int64?, limit: Int64, through manager: ConversationManager,
        afterSignIn: (@Sendable (InteractionRequest) async throws -> ConversationManager?)? = nil
    ) async throws -> ConversationResult {
        if let declaredLength, declaredLength > limit {
            throw Problem(.contentTooLarge, .payloadTooLarge, "the request body is larger than \(limit) bytes")
        }
        func exchange(_ spooled: SpooledBody, through manager: ConversationManager) async -> Result<ConversationResult, any Error> {
            do {
                return .success(
                    try await manager.execute(
                        UpstreamRequest(method: outgoing.method, url: outgoing.url, headers: outgoing.headers, body: spooled.body)))
            } catch {
                return .failure(error)
            }
        }
        let spooled: SpooledBody
        var outcome: Result<ConversationResult, any Error>
        // A body too large for memory is sent while it is still arriving: one of known length
        // at once, one without (chunked) once it outgrows memory. It is spooled for a replay,
        // unless the conversation cannot send it twice: then it passes through, kept nowhere.
        var streaming: (body: StreamedBody, first: [UInt8], rest: Hummingbird.RequestBody.AsyncIterator)?
        var inMemory: [UInt8] = []
        if let declaredLength, declaredLength > Int64(memoryBodyBytes) {
            streaming = (
                try await StreamedBody.start(length: declaredLength, kept: manager.mayResend, spool: spool), [], body.makeAsyncIterator()
            )
        } else {
            // Small enough for memory by its length, or of unknown length (chunked): read while it
            // fits; past that (only without a length) the rest streams.
            var rest = body.makeAsyncIterator()
            let first = try await SpooledBody.readStart(&rest, memoryLimit: memoryBodyBytes, limit: limit)
            if first.count > memoryBodyBytes {
                streaming = (try await StreamedBody.start(length: nil, first: first.count, kept: manager.mayResend, spool: spool), first, rest)
            } else {
                inMemory = first
            }
        }
        if let (streamed, first, rest) = streaming {
            spooled = streamed.spooled
            async let filled: Void = streamed.run(rest, first: first, limit: limit)
            outcome = await exchange(spooled, through: manager)
            streamed.exchanged(outcome)
            // The client's body first: when it broke off, that explains the exchange's failure.
            do { try await filled } catch {
                spooled.remove()
                if case .success(.response(let upstream)) = outcome { upstream.body.discard() }
                throw error
            }
        } else {
            spooled = SpooledBody(body: inMemory.isEmpty ? .empty : .bytes(inMemory), reservation: nil)
            outcome = await exchange(spooled, through: manager)
        }
        if let afterSignIn, case .success(.interactionRequired(let interaction)) = outcome {
            let next: ConversationManager?
            do {
                next = try await afterSignIn(interaction)
            } catch {
                spooled.remove()
                throw error
            }
            if let next { outcome = await exchange(spooled, through: next) }
        }
        // The conversation is over: no restart can replay the body any more.
        spooled.remove()
        return try outcome.get()
    }
}

/// A raw request target below a route prefix.
enum RequestTarget {
    /// The raw path after `prefix/` and the raw query; nil when the target does not start
    /// with `prefix` exactly, at a segment boundary (`//v1/proxy`, absolute form, `/webx`).
    /// Bytes, not Characters: the query starts at the first `?` byte, whatever follows it.
    static func split(_ target: String, prefix: String) -> (path: String, query: String?)? {
        let bytes = target.utf8
        let mark = bytes.firstIndex(of: UInt8(ascii: "?"))
        let pathPart = bytes[..<(mark ?? bytes.endIndex)]
        guard pathPart.starts(with: prefix.utf8) else { return nil }
        var rest = pathPart.dropFirst(prefix.utf8.count)
        guard rest.isEmpty || rest.first == UInt8(ascii: "/") else { return nil }
        if rest.first == UInt8(ascii: "/") { rest = rest.dropFirst() }
        let query = mark.map { String(Substring(bytes[bytes.index(after: $0)...])) }
        return (String(Substring(rest)), query)
    }
}
