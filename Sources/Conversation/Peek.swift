extension UpstreamResponse {
    /// Reads up to `limit` bytes of the body for a filter to look at, and puts
    /// them back in front of the rest, so the body is delivered whole.
    public mutating func peekBody(upTo limit: Int) async throws -> [UInt8] {
        var peeked: [UInt8] = []
        var iterator = body.makeAsyncIterator()
        var finished = false
        while peeked.count < limit {
            guard let chunk = try await iterator.next() else {
                finished = true
                break
            }
            peeked.append(contentsOf: chunk)
        }
        body = ResponseBody(source: PrefixedBodySource(prefix: peeked, rest: finished ? nil : body.source))
        return Array(peeked.prefix(limit))
    }
}

final class PrefixedBodySource: ResponseBodySource, @unchecked Sendable {
    // Only touched by the single reader of the body, as ResponseBody promises.
    private var prefix: [UInt8]?
    private let rest: (any ResponseBodySource)?

    init(prefix: [UInt8], rest: (any ResponseBodySource)?) {
        self.prefix = prefix.isEmpty ? nil : prefix
        self.rest = rest
    }

    func next() async throws -> [UInt8]? {
        if let prefix {
            self.prefix = nil
            return prefix
        }
        return try await rest?.next()
    }

    func cancel() { rest?.cancel() }
}
