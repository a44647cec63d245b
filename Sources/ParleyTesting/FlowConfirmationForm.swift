import Foundation

// For a registration without a verified user, a flow URL shows Parley's confirmation page, and
// only its button's post continues the flow. A browser test presses the button; a test without
// a browser reads the page's form and cookie and posts them as a browser would.

extension WebDriverSession {
    /// Opens a flow URL as a person does: the confirmation page, then its button. The browser
    /// then goes where the flow goes on (the authorization server, the web path, a form).
    public func openFlow(_ url: String) async throws {
        try await navigate(to: url)
        try await click(try await findElement(css: "[data-parley-confirm] button"))
    }
}

/// What a confirmation page hands a browser: its form's fields, and the page's cookie.
public struct ConfirmationForm: Sendable {
    public let secret: String
    public let token: String
    /// `parley_confirm=<nonce>`, as a browser sends it back.
    public let cookie: String

    /// The form of a confirmation page's answer; nil for any other answer.
    public init?(_ page: RawHTTPResponse) {
        self.init(status: page.status, setCookies: page.headers("Set-Cookie"), body: page.body)
    }

    /// The form of an answer given by its parts (`setCookies`: its `Set-Cookie` values).
    public init?(status: Int, setCookies: [String], body: [UInt8]) {
        let text = String(decoding: body, as: UTF8.self)
        func field(_ name: String) -> String? {
            guard let start = text.range(of: "name=\"\(name)\" value=\"") else { return nil }
            return String(text[start.upperBound...].prefix { $0 != "\"" })
        }
        guard status == 200, text.contains("data-parley-confirm"), let secret = field("k"), let token = field("token"),
            let setCookie = setCookies.first(where: { $0.hasPrefix("parley_confirm=") })
        else { return nil }
        self.secret = secret
        self.token = token
        cookie = String(setCookie.prefix { $0 != ";" })
    }

    /// The post a browser sends when the button is pressed.
    public var body: [UInt8] { Array("k=\(secret)&token=\(token)".utf8) }
    public var headers: [(String, String)] { [("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", cookie)] }

    /// Where the form posts, beside a flow URL's path: `…/flows/{id}?k=…` → `…/flows/{id}/confirm`.
    public static func target(beside flowTarget: String) -> String { String(flowTarget.prefix { $0 != "?" }) + "/confirm" }

    /// Opens the flow URL at `target` and presses the button, with `send(method, target, headers,
    /// body)` sending each request; the answer to the post.
    public static func confirm(
        _ target: String, send: (String, String, [(String, String)], [UInt8]) async throws -> RawHTTPResponse
    ) async throws -> RawHTTPResponse {
        let page = try await send("GET", target, [], [])
        guard let form = ConfirmationForm(page) else {
            throw RawHTTPError(description: "\(target) did not answer with a confirmation page: \(page.status) \(page.text.prefix(300))")
        }
        return try await send("POST", Self.target(beside: target), form.headers, form.body)
    }

    /// `confirm` against Parley on `port`.
    public static func confirm(port: Int, target: String) async throws -> RawHTTPResponse {
        try await confirm(target) { method, target, headers, body in
            try await RawHTTP.request(port: port, method: method, target: target, headers: headers, body: body)
        }
    }
}

extension RawHTTPResponse {
    /// Where an onward page sends the browser (`Refresh: 0; url=…`); nil for any other answer.
    public var onward: String? {
        guard status == 200, let refresh = header("Refresh"), refresh.hasPrefix("0; url=") else { return nil }
        return String(refresh.dropFirst("0; url=".count))
    }
}
