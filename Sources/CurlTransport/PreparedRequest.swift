internal import CCurl
import Conversation

/// curl_global_init, once per process, before any other curl call. Never undone:
/// curl_global_cleanup is not safe while other libraries may still use OpenSSL.
let curlGlobalInit: Void = {
    let rc = curl_global_init(c_parley_global_all())
    precondition(rc == CURLE_OK, "curl_global_init failed")
}()

/// An `UpstreamRequest` checked and turned into what the easy handle needs. Built on the
/// caller's task; carries no C pointer, so it can cross to the multi thread.
struct PreparedRequest: Sendable {
    let method: String
    let url: String
    /// For logs and error details; never the path or query, which may carry secrets.
    let host: String
    /// `Name: value` lines for CURLOPT_HTTPHEADER, including the suppressions.
    let headerLines: [String]
    let body: RequestBody
    let tls: TLSOptions
    let timeouts: Timeouts

    /// Headers curl derives itself from the body; a caller's copy would be sent twice or lie.
    static let derivedHeaders: Set<String> = ["content-length", "transfer-encoding", "expect"]

    init(_ request: UpstreamRequest) throws(TransportError) {
        _ = curlGlobalInit
        guard Self.isToken(request.method) else {
            throw TransportError(.invalidRequest, detail: "method is not an HTTP token")
        }
        self.method = request.method
        self.url = request.url
        self.host = try Self.host(of: request.url)

        var lines: [String] = []
        var sawAccept = false
        for field in request.headers {
            let lower = field.name.lowercased()
            if Self.derivedHeaders.contains(lower) { continue }
            if lower == "accept" { sawAccept = true }
            // "Name:" would make curl drop the header; "Name;" sends it with an empty value.
            lines.append(field.value.isEmpty ? "\(field.name);" : "\(field.name): \(field.value)")
        }
        if !sawAccept { lines.append("Accept:") }  // no curl default "Accept: */*"
        lines.append("Expect:")  // never "Expect: 100-continue"
        // A body of unknown size: chunked coding, which curl applies when asked this way.
        if request.body.length == nil, request.method != "HEAD" { lines.append("Transfer-Encoding: chunked") }
        self.headerLines = lines
        self.body = request.body
        self.tls = request.tls
        self.timeouts = request.timeouts
    }

    var isHead: Bool { method == "HEAD" }

    /// Whether the request carries a body (sent with CURLOPT_UPLOAD). Methods that
    /// normally have one send `Content-Length: 0` even when it is empty.
    var hasBody: Bool {
        if isHead { return false }
        return (body.length ?? 1) > 0 || ["POST", "PUT", "PATCH"].contains(method)
    }

    private static let tokenSymbols = Set("!#$%&'*+-.^_`|~".utf8)

    static func isToken(_ s: String) -> Bool {
        guard !s.isEmpty else { return false }
        let allowed = tokenSymbols
        for u in s.utf8 {
            let alnum = (u >= 0x30 && u <= 0x39) || (u >= 0x41 && u <= 0x5A) || (u >= 0x61 && u <= 0x7A)
            if !alnum && !allowed.contains(u) { return false }
        }
        return true
    }

    /// The host of an absolute http(s) URL, parsed by curl's own URL parser so that
    /// what is checked is what is used.
    static func host(of url: String) throws(TransportError) -> String {
        guard let handle = curl_url() else { throw TransportError(.unavailable, detail: "curl_url: out of memory") }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, url, 0) == CURLUE_OK else {
            throw TransportError(.invalidRequest, detail: "URL could not be parsed")
        }
        guard let scheme = part(handle, CURLUPART_SCHEME)?.lowercased(), scheme == "http" || scheme == "https" else {
            throw TransportError(.invalidRequest, detail: "URL scheme is not http or https")
        }
        guard let host = part(handle, CURLUPART_HOST), !host.isEmpty else {
            throw TransportError(.invalidRequest, detail: "URL has no host")
        }
        return host
    }

    private static func part(_ handle: OpaquePointer, _ which: CURLUPart) -> String? {
        var out: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, which, &out, 0) == CURLUE_OK, let out else { return nil }
        defer { curl_free(out) }
        return String(cString: out)
    }
}
