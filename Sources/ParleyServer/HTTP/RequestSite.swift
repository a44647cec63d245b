import Foundation
import HTTPTypes
import Hummingbird
import ParleyDomain

/// Where a browser request comes from, as its Fetch Metadata (`Sec-Fetch-Site`,
/// `Sec-Fetch-Mode`, `Sec-Fetch-Dest`) and `Origin` tell: the one rule behind the refusals
/// of the Basic form, the confirmation button and the hosted upstream's web path.
enum RequestSite {
    /// Whether a request comes from `origin` itself. `Sec-Fetch-Site: cross-site` or
    /// `same-site` says no; so does an `Origin` that is another origin. Parley's pages send
    /// no referrer, so a browser posts them with `Origin: null`, which (like no `Origin` at
    /// all) says nothing: the page's secret and token tell then.
    static func isSameOrigin(_ headers: HTTPFields, origin: String?) -> Bool {
        if let site = headers[.secFetchSite], site == "cross-site" || site == "same-site" { return false }
        if let sent = headers[.origin], sent != "null", sent != origin { return false }
        return true
    }

    /// Whether the hosted upstream's web path takes this request: a safe method (`GET`,
    /// `HEAD`, `OPTIONS`), a request from `origin` itself, or a top-level navigation from
    /// another site (`Sec-Fetch-Mode: navigate` to a `document`: the identity provider's form
    /// post to the ACS). A browser that sends no Fetch Metadata cannot tell a form's
    /// navigation from a script's request; then a request a form could have sent (`POST`
    /// of a form's content type) passes, and any other needed a CORS preflight the web path
    /// never grants (see docs/decisions.md).
    static func admitsOnWebPath(_ method: HTTPRequest.Method, _ headers: HTTPFields, origin: String?) -> Bool {
        if method == .get || method == .head || method == .options { return true }
        if isSameOrigin(headers, origin: origin) { return true }
        if let mode = headers[.secFetchMode] {
            let destination = headers[.secFetchDest]
            return mode == "navigate" && (destination == nil || destination == "document")
        }
        guard method == .post else { return false }
        guard let type = headers[.contentType] else { return true }
        let essence = type.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return essence == "application/x-www-form-urlencoded" || essence == "multipart/form-data" || essence == "text/plain"
    }
}

extension HTTPField.Name {
    static let secFetchSite = Self("Sec-Fetch-Site")!
    static let secFetchMode = Self("Sec-Fetch-Mode")!
    static let secFetchDest = Self("Sec-Fetch-Dest")!
    static let xForwardedFor = Self("X-Forwarded-For")!
}

extension RateLimits {
    /// The key `request`'s client is counted under: `clientAddress(peer:forwardedFor:)` of the
    /// peer and the request's `X-Forwarded-For`.
    func client(of request: Request, peer: String?) -> String {
        clientAddress(peer: peer, forwardedFor: request.headers[.xForwardedFor])
    }
}

extension Request {
    /// The `wait` query parameter of a long-poll, as it came (`LongPoll.seconds` reads it).
    var waitParameter: String? { uri.queryParameters.get("wait").map { String($0) } }
}

extension PageStatus {
    /// The status a page is sent with.
    var http: HTTPResponse.Status { HTTPResponse.Status(code: code, reasonPhrase: "") }
}

extension FlowRoute.Method {
    /// The method a flow route is mounted for.
    var http: HTTPRequest.Method {
        switch self {
        case .get: .get
        case .post: .post
        }
    }
}
