import HTTPTypes
import Hummingbird
import Mustache
import NIOCore

/// Parley's own browser pages, rendered from Mustache templates (values are
/// HTML-escaped by the template engine). No script, no inline style; `no-store`;
/// a CSP with `frame-ancestors 'none'`.
enum Page {
    static let securityHeaders: HTTPFields = [
        .cacheControl: "no-store",
        .contentSecurityPolicy: "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        .xFrameOptions: "DENY",
        .referrerPolicy: "no-referrer",
        .xContentTypeOptions: "nosniff",
    ]

    /// The templates, parsed once. A template that does not parse is a programming
    /// error that the page tests catch; at run time it degrades to a plain message.
    static let templates: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in PageTemplates.all { try? library.register(text, named: name) }
        return library
    }()

    /// A message page; `attributes` become `data-…` attributes on `<body>` for tests and scripts.
    static func html(_ status: HTTPResponse.Status, title: String, message: String, attributes: [String: String] = [:]) -> Response {
        let body = render(title: title, message: message, attributes: attributes)
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func render(title: String, message: String, attributes: [String: String] = [:]) -> String {
        let context: [String: Any] = [
            "title": title, "message": message,
            "attributes": attributes.sorted { $0.key < $1.key }.map { ["name": $0.key, "value": $0.value] },
        ]
        return templates.render(context, withTemplate: "message") ?? "<!doctype html><title>Parley</title>"
    }

    /// The basic flow's credentials form. The password is never put back into the page.
    static func credentialsForm(destination: String, action: String, secret: String, error: String?) -> Response {
        var context: [String: Any] = ["destination": destination, "action": action, "secret": secret]
        if let error { context["error"] = error }
        let body = templates.render(context, withTemplate: "credentials") ?? "<!doctype html><title>Parley</title>"
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// The confirmation page of a flow (see `FlowConfirmation`): who asked, and one button.
    static func confirmation(_ page: ConfirmationPage) -> Response {
        let notGiven = "not given"
        let context: [String: Any] = [
            "destination": page.destination, "kind": page.kind, "deviceType": page.deviceType ?? notGiven,
            "deviceModel": page.deviceModel ?? notGiven, "userHint": page.userHint ?? notGiven, "age": page.age, "action": page.action,
            "secret": page.secret, "token": page.token,
        ]
        return htmlPage(.ok, templates.render(context, withTemplate: "confirm"))
    }

    /// A page the browser leaves at once for `location` (`Refresh: 0`), with a link for one that does not.
    static func onward(_ location: String) -> Response {
        var response = htmlPage(.ok, templates.render(["location": location], withTemplate: "onward"))
        response.headers[.refresh] = "0; url=" + location
        return response
    }

    private static func htmlPage(_ status: HTTPResponse.Status, _ body: String?) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        let text = body ?? "<!doctype html><title>Parley</title>"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String, status: HTTPResponse.Status = .found) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        return Response(status: status, headers: headers)
    }

    static func problem(_ problem: Problem) -> Response {
        html(problem.status, title: problem.title, message: problem.detail, attributes: ["data-parley-error": problem.code.rawValue])
    }

    /// Browser pages answer failures as HTML, not problem+json.
    static func guarding(_ body: () async throws -> Response) async -> Response {
        do { return try await body() } catch { return problem(Problem.from(error)) }
    }
}

extension FlowPage {
    /// The page as the browser gets it.
    var response: Response {
        switch self {
        case .redirect(let location, let status, let cookies):
            var response = Page.redirect(location, status: status)
            for cookie in cookies { response.headers.append(HTTPField(name: .setCookie, value: cookie)) }
            return response
        case .credentialsForm(let destination, let action, let secret, let error):
            return Page.credentialsForm(destination: destination, action: action, secret: secret, error: error)
        case .message(let status, let title, let message, let attributes):
            return Page.html(status, title: title, message: message, attributes: attributes)
        case .failure(let problem):
            return Page.problem(problem)
        case .confirmation(let page, let cookies):
            var response = Page.confirmation(page)
            for cookie in cookies { response.headers.append(HTTPField(name: .setCookie, value: cookie)) }
            return response
        case .onward(let location, let cookies):
            var response = Page.onward(location)
            for cookie in cookies { response.headers.append(HTTPField(name: .setCookie, value: cookie)) }
            return response
        }
    }
}

/// The page templates, compiled into the binary so it runs from any directory.
enum PageTemplates {
    static let all: [(String, String)] = [("message", message), ("credentials", credentials), ("confirm", confirm), ("onward", onward)]

    static let message = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}}</title></head>
        <body{{#attributes}} {{name}}="{{value}}"{{/attributes}}><main><h1>{{title}}</h1><p>{{message}}</p></main></body></html>
        """

    static let credentials = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Sign in to {{destination}}</title></head>
        <body data-parley-flow-kind="basic"><main>
        <h1>Sign in to {{destination}}</h1>
        {{#error}}<p role="alert" id="error">{{error}}</p>{{/error}}
        <form method="post" action="{{action}}">
        <input type="hidden" name="k" value="{{secret}}">
        <p><label for="username">User name</label><br>
        <input id="username" name="username" autocomplete="username" autocapitalize="none" spellcheck="false" required></p>
        <p><label for="password">Password</label><br>
        <input id="password" name="password" type="password" autocomplete="current-password" required></p>
        <p><button type="submit">Sign in</button></p>
        </form>
        </main></body></html>
        """

    /// The confirmation page: who asked for the sign-in, and one button. No script, no style.
    static let confirm = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Sign in to {{destination}}?</title></head>
        <body data-parley-flow-kind="{{kind}}"><main>
        <h1>Sign in to {{destination}}?</h1>
        <p>An app asked Parley for this sign-in. Continue only if you started it yourself, just now.
        If someone sent you this link, close this page: whoever continues signs in for the app that asked.</p>
        <h2>Who asked</h2>
        <dl>
        <dt>Service</dt><dd id="destination">{{destination}}</dd>
        <dt>Device type</dt><dd id="device-type">{{deviceType}}</dd>
        <dt>Device model</dt><dd id="device-model">{{deviceModel}}</dd>
        <dt>User name the app gave</dt><dd id="user-hint">{{userHint}}</dd>
        <dt>Requested</dt><dd id="age">{{age}}</dd>
        </dl>
        <form method="post" action="{{action}}" data-parley-confirm>
        <input type="hidden" name="k" value="{{secret}}">
        <input type="hidden" name="token" value="{{token}}">
        <p><button type="submit">Continue to sign in to {{destination}}</button></p>
        </form>
        </main></body></html>
        """

    /// Onward after a form post (the `Refresh` header leads; the link is for a browser that does not follow it).
    static let onward = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Continuing the sign-in</title></head>
        <body data-parley-onward><main><h1>Continuing the sign-in</h1>
        <p><a href="{{location}}">Continue</a></p>
        </main></body></html>
        """
}

extension HTTPField.Name {
    static let xFrameOptions = Self("X-Frame-Options")!
    static let referrerPolicy = Self("Referrer-Policy")!
    static let xContentTypeOptions = Self("X-Content-Type-Options")!
    static let parleyFlow = Self("Parley-Flow")!
    static let refresh = Self("Refresh")!
    static let parleyRequestID = Self("Parley-Request-Id")!
    /// RFC 7240.
    static let preferHeader = Self("Prefer")!
    static let preferenceApplied = Self("Preference-Applied")!
    /// The destination of an agent's call (`AgentAccess`).
    static let parleyDestination = Self(AgentAccess.destinationHeader)!
}
