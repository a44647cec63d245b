import AuthFlows
import Conversation
import HTTPTypes
import Hummingbird
import Mustache
import NIOCore
import ParleyDomain

/// What every one of Parley's own pages sends: no script anywhere, styles and images only from
/// Parley itself (`PageAssets`), forms only to Parley, never in a frame, never cached.
enum Page {
    static let securityHeaders: HTTPFields = [
        .cacheControl: "no-store",
        .contentSecurityPolicy:
            "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        .xFrameOptions: "DENY",
        .referrerPolicy: "no-referrer",
        .xContentTypeOptions: "nosniff",
    ]

    static func redirect(_ location: String, status: HTTPResponse.Status = .found) -> Response {
        Response(status: status, headers: redirectHeaders(location))
    }

    /// A redirect's headers: the pages' own, and `Location`.
    static func redirectHeaders(_ location: String) -> HTTPFields {
        var headers = securityHeaders
        headers[.location] = location
        return headers
    }
}

extension PageNotice {
    var status: HTTPResponse.Status {
        switch self {
        case .linkNotValid, .cannotStart, .passcodeNotAwaited, .noSuchService, .notServedHere: .notFound
        case .formFromOtherPage, .confirmationNotValid, .noSignInHere, .moreThanOneSignIn, .notThisBrowser: .forbidden
        case .expired: .gone
        case .answerNotValid, .passcodeMissing, .passcodeRefused: .badRequest
        case .cannotHost: .badGateway
        }
    }

    var code: Problem.Code {
        switch status {
        case .notFound: .notFound
        case .forbidden: .forbidden
        case .gone: .flowExpired
        case .badGateway: .upstreamUnavailable
        default: .invalidRequest
        }
    }
}

/// Parley's own browser pages, rendered from Mustache templates (every value HTML-escaped by
/// the template engine) in the language the browser prefers (`PageLanguage`), with the
/// destination's name, logo and accent colour (`PageAssets`).
struct Pages: Sendable {
    let catalogs: PageCatalogs
    let assets: PageAssets
    /// How pages name each destination (`displayName`), by name.
    let displayNames: [String: String]
    /// The path prefix of Parley's public URL, and of the web origin's (`PARLEY_WEB_PUBLIC_URL`)
    /// for a page served on that host: the stylesheet and logos are linked below it.
    let publicPrefix: String
    let web: (host: String, prefix: String)?

    init(destinations: [String: Destination], assets: PageAssets, publicURL: String, webURL: String? = nil, catalogs: PageCatalogs = .embedded) {
        self.catalogs = catalogs
        self.assets = assets
        displayNames = destinations.mapValues(\.displayName)
        publicPrefix = URLParts(publicURL)?.path ?? ""
        web = webURL.flatMap(URLParts.init).map { ($0.host, $0.path) }
    }

    /// The templates, parsed once. A template that does not parse is a programming error that
    /// the page tests catch; at run time it degrades to a bare page.
    static let templates: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in PageTemplates.all { try? library.register(text, named: name) }
        return library
    }()

    // MARK: - Answers

    /// A flow kind's or controller's page as the browser gets it.
    func response(_ page: FlowPage, for request: Request) -> Response {
        render(page, language: PageLanguage.negotiated(request.headers[.acceptLanguage]), base: base(for: request))
    }

    /// The page in `language`, its stylesheet and logo linked below `base`.
    func render(_ page: FlowPage, language: PageLanguage, base: String = "") -> Response {
        let page = document(page, language: language, base: base)
        return Response(status: page.status, headers: page.headers, body: .init(byteBuffer: ByteBuffer(string: page.html)))
    }

    /// The page in `language` as status, headers and HTML (empty for a redirect).
    func document(_ page: FlowPage, language: PageLanguage, base: String = "") -> PageDocument {
        switch page {
        case .redirect(let location, let status, let cookies):
            return withCookies(PageDocument(status: status.http, headers: Page.redirectHeaders(location), html: ""), cookies)
        case .onward(let location, let cookies):
            var context = common(language, base: base, service: nil, title: text("onward.title", language))
            context["location"] = location
            context["link"] = text("onward.link", language)
            context["attributes"] = attributes(["data-parley-onward": ""])
            var response = html(.ok, fill("onward", context), language)
            response.headers[.refresh] = "0; url=" + location
            return withCookies(response, cookies)
        case .credentialsForm(let form):
            return credentials(form, language, base: base)
        case .confirmation(let page, let cookies):
            return withCookies(confirmation(page, language, base: base), cookies)
        case .finished(let page):
            return finished(page, language, base: base)
        case .notice(let notice, let service, let age):
            return noticePage(notice, service: service, age: age, language, base: base)
        case .message(let status, let title, let message, let attributes):
            var context = common(language, base: base, service: nil, title: title)
            context["paragraphs"] = [message]
            context["attributes"] = self.attributes(attributes)
            return html(status.http, fill("message", context), language)
        case .failure(let error):
            return problemPage(Problem.from(error), language, base: base)
        }
    }

    func notice(_ notice: PageNotice, service: String? = nil, for request: Request) -> Response {
        response(.notice(notice, service: service), for: request)
    }

    func problem(_ problem: Problem, for request: Request) -> Response {
        response(.failure(problem), for: request)
    }

    /// Browser pages answer failures as HTML pages, not problem+json.
    func guarding(_ request: Request, _ body: () async throws -> FlowPage) async -> Response {
        do { return response(try await body(), for: request) } catch { return problem(Problem.from(error), for: request) }
    }

    /// As `guarding`, for a handler that answers with a response of its own (the web path).
    func guardingResponse(_ request: Request, _ body: () async throws -> Response) async -> Response {
        do { return try await body() } catch { return problem(Problem.from(error), for: request) }
    }

    // MARK: - Pages

    private func credentials(_ form: CredentialsForm, _ language: PageLanguage, base: String) -> PageDocument {
        let service = displayName(form.service)
        var context = common(language, base: base, service: form.service, title: text("form.title", language, service))
        context["lead"] = text("form.lead", language, service)
        context["asked"] = askedLine(form.requester, language)
        context["action"] = form.action
        context["secret"] = form.secret
        context["usernameLabel"] = text("form.username", language)
        context["passwordLabel"] = text("form.password", language)
        context["button"] = text("form.button", language)
        if let error = form.error { context["error"] = text("form.error.\(error.rawValue)", language) }
        context["attributes"] = attributes(["data-parley-flow-kind": "basic"])
        return html(.ok, fill("credentials", context), language)
    }

    private func confirmation(_ page: ConfirmationPage, _ language: PageLanguage, base: String) -> PageDocument {
        let service = displayName(page.service)
        let values = ["service": service]
        let notGiven = text("requester.notGiven", language)
        let next = ["basic", "oauth2", "otp", "saml2"].contains(page.kind) ? page.kind : "other"
        var context = common(language, base: base, service: page.service, title: text("confirm.title", language, values))
        context["lead"] = text("confirm.lead", language, values)
        context["next"] = text("confirm.next.\(next)", language, values)
        context["warning"] = text("confirm.warning", language)
        context["heading"] = text("requester.heading", language)
        // What Parley knows (its configuration, the flow's age) apart from what the app sent about
        // itself, which anybody can have typed: "Alice's iPhone" proves nothing.
        context["rows"] = [
            ["id": "destination", "label": text("requester.service", language), "value": service],
            ["id": "app", "label": text("requester.app", language), "value": page.requester.app ?? notGiven],
            ["id": "age", "label": text("requester.requested", language), "value": catalogs.age(page.age, language)],
        ]
        context["claimedHeading"] = text("requester.claimed", language)
        context["claimedRows"] = [
            ["id": "device-type", "label": text("requester.deviceType", language), "value": page.requester.deviceType ?? notGiven],
            ["id": "device-model", "label": text("requester.deviceModel", language), "value": page.requester.deviceModel ?? notGiven],
            ["id": "user-hint", "label": text("requester.user", language), "value": page.requester.userHint ?? notGiven],
        ]
        context["action"] = page.action
        context["secret"] = page.secret
        context["token"] = page.token
        context["button"] = text("confirm.button", language, values)
        context["attributes"] = attributes(["data-parley-flow-kind": page.kind])
        return html(.ok, fill("confirm", context), language)
    }

    private func finished(_ page: FinishedPage, _ language: PageLanguage, base: String) -> PageDocument {
        let values = ["service": page.service.map(displayName) ?? "", "age": catalogs.age(page.age, language)]
        let state = page.status.rawValue
        var context = common(
            language, base: base, service: page.service, title: text("done.\(state).title", language), bodyClass: "status-\(state)")
        var paragraphs = [text("done.\(state).text", language, values)]
        if page.status == .failed {
            let reason = page.reason.flatMap { FinishedPage.explainedReasons.contains($0) ? $0 : nil } ?? "other"
            paragraphs.append(text("failed.\(reason)", language, values))
        }
        if let asked = askedLine(page.requester, language) { paragraphs.append(asked) }
        context["paragraphs"] = paragraphs
        context["attributes"] = attributes(["data-parley-flow-status": state])
        let status: HTTPResponse.Status =
            switch page.status {
            case .completed, .pending: .ok
            case .failed: .forbidden
            case .expired: .gone
            }
        return html(status, fill("message", context), language)
    }

    private func noticePage(_ notice: PageNotice, service: String?, age: PageAge?, _ language: PageLanguage, base: String) -> PageDocument {
        let values = ["service": service.map(displayName) ?? ""]
        var context = common(language, base: base, service: service, title: text("notice.\(notice.rawValue).title", language))
        var paragraphs = [text("notice.\(notice.rawValue).text", language, values)]
        if let age { paragraphs.append(text("notice.startedAt", language, ["age": catalogs.age(age, language)])) }
        context["paragraphs"] = paragraphs
        context["attributes"] = attributes(["data-parley-error": notice.code.rawValue])
        return html(notice.status, fill("message", context), language)
    }

    /// A failure without a notice of its own: a headline by its kind, what to do, and the
    /// problem's detail (written for clients: never a secret) for whoever helps the person.
    private func problemPage(_ problem: Problem, _ language: PageLanguage, base: String) -> PageDocument {
        let title: String
        let advice: String
        switch problem.code {
        case .rateLimited:
            title = text("error.rateLimited.title", language)
            advice = text("error.rateLimited.text", language)
        case .flowExpired:
            title = text("notice.expired.title", language)
            advice = text("notice.expired.text", language)
        case .upstreamUnavailable, .upstreamTimeout:
            title = text("error.upstream.title", language)
            advice = text("error.text", language)
        default:
            title = problem.status.code >= 500 ? text("error.server.title", language) : text("error.client.title", language)
            advice = text("error.text", language)
        }
        var context = common(language, base: base, service: nil, title: title)
        context["paragraphs"] = [advice]
        context["detailLabel"] = text("error.detail", language)
        context["detail"] = problem.detail
        context["attributes"] = attributes(["data-parley-error": problem.code.rawValue])
        var response = html(problem.status, fill("message", context), language)
        for field in problem.headers { response.headers.append(field) }
        return response
    }

    // MARK: - Parts

    /// What every page's layout needs: language, stylesheet, the destination's name, logo and
    /// accent (its `.brand-N` class, before any `bodyClass` of the page's own).
    private func common(_ language: PageLanguage, base: String, service: String?, title: String, bodyClass: String? = nil) -> [String: Any] {
        var context: [String: Any] = ["lang": language.rawValue, "title": title, "stylesheet": base + assets.stylesheetPath]
        if let service {
            context["service"] = displayName(service)
            if let logo = assets.logoPath(of: service) { context["logo"] = base + logo }
        }
        let classes = [service.flatMap(assets.brandClass(of:)), bodyClass].compactMap { $0 }
        if !classes.isEmpty { context["bodyClass"] = classes.joined(separator: " ") }
        return context
    }

    /// "Asked for by … on …": which app and device asked, in one line (nil when neither is known).
    private func askedLine(_ requester: PageRequester?, _ language: PageLanguage) -> String? {
        guard let requester else { return nil }
        switch (requester.app, requester.device) {
        case (let app?, let device?): return text("requester.line.appDevice", language, ["app": app, "device": device])
        case (nil, let device?): return text("requester.line.device", language, ["device": device])
        case (let app?, nil): return text("requester.line.app", language, ["app": app])
        case (nil, nil): return nil
        }
    }

    private func displayName(_ service: String) -> String { displayNames[service] ?? service }

    private func text(_ key: String, _ language: PageLanguage, _ values: [String: String] = [:]) -> String {
        catalogs.text(key, language, values)
    }

    private func text(_ key: String, _ language: PageLanguage, _ service: String) -> String {
        catalogs.text(key, language, ["service": service])
    }

    /// Where the stylesheet and logos are linked from: below the web origin's path on its host.
    private func base(for request: Request) -> String {
        if let web, WebOriginGuard.host(of: request.head.authority) == web.host { return web.prefix }
        return publicPrefix
    }

    private func attributes(_ values: [String: String]) -> [[String: String]] {
        values.sorted { $0.key < $1.key }.map { ["name": $0.key, "value": $0.value] }
    }

    private func fill(_ template: String, _ context: [String: Any]) -> String {
        Self.templates.render(context, withTemplate: template) ?? "<!doctype html><title>Parley</title>"
    }

    private func html(_ status: HTTPResponse.Status, _ body: String, _ language: PageLanguage) -> PageDocument {
        var headers = Page.securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.contentLanguage] = language.rawValue
        headers[.vary] = "Accept-Language"
        return PageDocument(status: status, headers: headers, html: body)
    }

    private func withCookies(_ page: PageDocument, _ cookies: [String]) -> PageDocument {
        var page = page
        for cookie in cookies { page.headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return page
    }
}

/// A page as it is sent: status, headers, and its HTML (empty for a redirect).
struct PageDocument: Sendable {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var html: String
}


/// The page templates, compiled into the binary so it runs from any directory. `head` and
/// `foot` are the layout every page shares.
enum PageTemplates {
    static let all: [(String, String)] = [
        ("head", head), ("foot", foot), ("message", message), ("credentials", credentials), ("confirm", confirm), ("onward", onward),
    ]

    static let head = """
        <!doctype html>
        <html lang="{{lang}}"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="color-scheme" content="light dark"><meta name="referrer" content="no-referrer">
        <title>{{title}}</title><link rel="stylesheet" href="{{stylesheet}}"></head>
        <body{{#bodyClass}} class="{{bodyClass}}"{{/bodyClass}}{{#attributes}} {{name}}="{{value}}"{{/attributes}}><main>
        {{#service}}<header class="service">{{#logo}}<img src="{{logo}}" alt="" height="40">{{/logo}}<span>{{service}}</span></header>{{/service}}

        """

    static let foot = """
        </main></body></html>

        """

    static let message = """
        {{> head}}<h1>{{title}}</h1>
        {{#paragraphs}}<p>{{.}}</p>
        {{/paragraphs}}{{#detail}}<p class="detail">{{detailLabel}}: <code>{{detail}}</code></p>
        {{/detail}}{{> foot}}
        """

    static let credentials = """
        {{> head}}<h1>{{title}}</h1>
        <p class="lead">{{lead}}</p>
        {{#asked}}<p class="next">{{asked}}</p>{{/asked}}
        {{#error}}<p role="alert" id="error" class="alert">{{error}}</p>{{/error}}
        <form method="post" action="{{action}}">
        <input type="hidden" name="k" value="{{secret}}">
        <div class="field"><label for="username">{{usernameLabel}}</label>
        <input id="username" name="username" type="text" autocomplete="username" autocapitalize="none" spellcheck="false" required></div>
        <div class="field"><label for="password">{{passwordLabel}}</label>
        <input id="password" name="password" type="password" autocomplete="current-password" required></div>
        <button type="submit">{{button}}</button>
        </form>
        {{> foot}}
        """

    /// The confirmation page: who asked for the sign-in, what happens next, and one button.
    static let confirm = """
        {{> head}}<h1>{{title}}</h1>
        <p class="lead">{{lead}}</p>
        <p class="next">{{next}}</p>
        <p class="warning">{{warning}}</p>
        <h2>{{heading}}</h2>
        <dl class="requester">
        {{#rows}}<dt>{{label}}</dt><dd id="{{id}}">{{value}}</dd>
        {{/rows}}</dl>
        <h2>{{claimedHeading}}</h2>
        <dl class="requester claimed" data-parley-unchecked>
        {{#claimedRows}}<dt>{{label}}</dt><dd id="{{id}}">{{value}}</dd>
        {{/claimedRows}}</dl>
        <form method="post" action="{{action}}" data-parley-confirm>
        <input type="hidden" name="k" value="{{secret}}">
        <input type="hidden" name="token" value="{{token}}">
        <button type="submit">{{button}}</button>
        </form>
        {{> foot}}
        """

    /// Onward after a form post (the `Refresh` header leads; the link is for a browser that does not follow it).
    static let onward = """
        {{> head}}<h1>{{title}}</h1>
        <p><a class="button" href="{{location}}">{{link}}</a></p>
        {{> foot}}
        """
}

extension HTTPField.Name {
    static let xFrameOptions = Self("X-Frame-Options")!
    static let referrerPolicy = Self("Referrer-Policy")!
    static let xContentTypeOptions = Self("X-Content-Type-Options")!
    static let crossOriginResourcePolicy = Self("Cross-Origin-Resource-Policy")!
    static let parleyFlow = Self("Parley-Flow")!
    static let refresh = Self("Refresh")!
    static let parleyRequestID = Self("Parley-Request-Id")!
    /// RFC 7240.
    static let preferHeader = Self("Prefer")!
    static let preferenceApplied = Self("Preference-Applied")!
    /// The destination of an agent's call (`AgentAccess`).
    static let parleyDestination = Self(AgentAccess.destinationHeader)!
}
