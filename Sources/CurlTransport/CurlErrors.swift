internal import CCurl
import Conversation

/// Maps curl result codes to `TransportError`. The detail names the host and curl's
/// error kind only: never the URL path or query, a header, a body or a password.
enum CurlErrors {
    static func error(for code: CURLcode, host: String, during step: String? = nil, requestSent: Bool = true) -> TransportError {
        let kind = String(cString: curl_easy_strerror(code))
        let context = step.map { " (setting \($0))" } ?? ""
        return TransportError(
            classify(code), detail: "\(host): \(kind) [curl \(code.rawValue)]\(context)", mayHaveReachedPeer: requestSent)
    }

    static func classify(_ code: CURLcode) -> TransportError.Code {
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout
        case CURLE_WEIRD_SERVER_REPLY, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_CONTENT_ENCODING:
            // The peer's answer is not usable HTTP (garbage, HTTP/0.9, a broken encoding).
            // Requests only ever name http(s) URLs, so an unsupported protocol is the reply's.
            return .invalidResponse
        case CURLE_URL_MALFORMAT, CURLE_BAD_FUNCTION_ARGUMENT,
            CURLE_UNKNOWN_OPTION, CURLE_NOT_BUILT_IN, CURLE_READ_ERROR,
            CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND,
            CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_CIPHER:
            // The request cannot be expressed: bad URL, unreadable body, unusable client
            // certificate (wrong password, not PKCS#12) or CA bundle.
            return .invalidRequest
        default:
            // Could not resolve or connect, TLS handshake or verification failed, the peer
            // reset or closed the connection, a malformed reply.
            return .unavailable
        }
    }
}
