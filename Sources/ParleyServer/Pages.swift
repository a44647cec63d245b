import AuthFlows
import Conversation
import Foundation
import Hummingbird
import Logging
import NIOCore
import ParleyCrypto

/// Parley's own browser pages: the flow start page, the completion page, failures.
/// No script, no inline style; `no-store`; CSP with `frame-ancestors 'none'`.
enum Page {
    static let securityHeaders: HTTPFields = [
        .cacheControl: "no-store",
        .contentSecurityPolicy: "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        .init("X-Frame-Options")!: "DENY",
        .init("Referrer-Policy")!: "no-referrer",
        .init("X-Content-Type-Options")!: "nosniff",
    ]

    static func html(_ status: HTTPResponse.Status, title: String, message: String, attributes: [String: String] = [:]) -> Response {
        let attrs = attributes.sorted { $0.key < $1.key }.map { " \($0.key)=\"\(escape($0.value))\"" }.joined()
        let body = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title))</title></head>
            <body\(attrs)><main><h1>\(escape(title))</h1><p>\(escape(message))</p></main></body></html>
            """
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func redirect(_ location: String, status: HTTPResponse.Status = .found) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        return Response(status: status, headers: headers)
    }

    static func problem(_ problem: Problem) -> Response {
        html(problem.status, title: problem.title, message: problem.detail, attributes: ["data-parley-error": problem.code.rawValue])
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "&": out += "&amp;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }
}

extension Parley {
    /// `GET /flows/{id}?k=…`: checks the secret in constant time, then sends the browser on.
    func flowStartPage(id: String, secret: String?) async throws -> Response {
        guard let uuid = UUID(uuidString: id), let secret, let flow = try await currentFlow(uuid),
            constantTimeEquals(SHA256.hash(Array(secret.utf8)), flow.secretHash)
        else { return Page.problem(.notFound("no such flow, or the link is not valid")) }
        switch flow.status {
        case "pending": break
        case "expired": return Page.problem(Problem(.gone, .flowExpired, "this sign-in link has expired; start again in the app"))
        default: return Page.redirect(configuration.publicURL + "/flows/\(flow.idString)/done", status: .seeOther)
        }
        guard flow.kind == "oauth2", let registration = try await registrations.find(id: flow.registrationID),
            let destination = configuration.destinations[registration.destination],
            let settings = try? OAuth2Settings(destination: destination), let endpoint = settings.authorizationEndpoint
        else { return Page.problem(Problem(.notFound, .notFound, "this flow cannot be started here")) }

        let state = SecureRandom.token(byteCount: 32)
        let verifier = PKCE.verifier()
        let sealedVerifier = configuration.keyRing.seal(verifier, associatedData: "flows.pkce:\(flow.idString)")
        guard try await flows.begin(id: flow.id, stateHash: SHA256.hash(Array(state.utf8)), pkceVerifierSealed: sealedVerifier) else {
            return Page.redirect(configuration.publicURL + "/flows/\(flow.idString)/done", status: .seeOther)
        }
        var parameters = [
            ("response_type", "code"), ("client_id", settings.clientID), ("redirect_uri", oauth2RedirectURI), ("state", state),
            ("code_challenge", PKCE.challenge(for: verifier)), ("code_challenge_method", "S256"),
        ]
        if !settings.scopes.isEmpty { parameters.append(("scope", settings.scopes.joined(separator: " "))) }
        let separator = endpoint.contains("?") ? "&" : "?"
        return Page.redirect(endpoint + separator + FormEncoding.encode(parameters))
    }

    var oauth2RedirectURI: String { configuration.publicURL + "/callback/oauth2" }

    /// `GET /callback/oauth2`: the `state` claims its flow exactly once; the code is
    /// exchanged with the PKCE verifier; the tokens are stored; the flow completes.
    func oauth2Callback(query: [(String, String)], logger: Logger) async throws -> Response {
        func value(_ name: String) -> String? { query.first { $0.0 == name }?.1 }
        guard let state = value("state"), !state.isEmpty, state.utf8.count <= 256,
            let flow = try await flows.claim(stateHash: SHA256.hash(Array(state.utf8)))
        else {
            logger.info("oauth2 callback refused: unknown or used state")
            return Page.problem(.invalid("this sign-in answer is not valid, or it was used already"))
        }
        if flow.expiresAt <= clock.now {
            try await flowFinished(flow, status: "expired", error: nil, logger: logger)
            return Page.problem(Problem(.gone, .flowExpired, "this sign-in took too long; start again in the app"))
        }
        let done = Page.redirect(configuration.publicURL + "/flows/\(flow.idString)/done", status: .seeOther)
        if let error = value("error") {
            try await flowFinished(flow, status: "failed", error: TokenEndpointClient.safeErrorCode(error), logger: logger)
            return done
        }
        guard let code = value("code"), !code.isEmpty, let sealed = flow.pkceVerifierSealed,
            let registration = try await registrations.find(id: flow.registrationID),
            let destination = configuration.destinations[registration.destination],
            let endpoint = configurator.tokenEndpoint(for: destination)
        else {
            try await flowFinished(flow, status: "failed", error: "invalid_callback", logger: logger)
            return done
        }
        let verifier = try configuration.keyRing.openString(sealed, associatedData: "flows.pkce:\(flow.idString)")
        let outcome = await endpoint.request([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", oauth2RedirectURI), ("code_verifier", verifier),
        ])
        switch outcome {
        case .token(let token):
            let key = TokenKey(
                destination: destination.name, registrationID: registration.idString,
                scopeKey: flow.scopeKey ?? endpoint.settings.defaultScopeKey)
            try await oauth2.store(token, for: key, grant: .authorizationCode)
            try await flowFinished(flow, status: "completed", error: nil, logger: logger)
        case .permanent(let error):
            try await flowFinished(flow, status: "failed", error: error, logger: logger)
        case .transient:
            try await flowFinished(flow, status: "failed", error: "temporarily_unavailable", logger: logger)
        }
        return done
    }

    /// `/flows/{id}/done`: the end page; with an allowed `returnUrl`, a `303` back to the app.
    func flowDonePage(id: String) async throws -> Response {
        guard let uuid = UUID(uuidString: id), let flow = try await currentFlow(uuid) else {
            return Page.problem(.notFound("no such flow"))
        }
        if flow.status != "pending", let returnUrl = flow.returnUrl, let registration = try await registrations.find(id: flow.registrationID),
            configuration.destinations[registration.destination]?.allowsReturnURL(returnUrl) == true
        {
            let separator = returnUrl.contains("?") ? "&" : "?"
            return Page.redirect(returnUrl + separator + FormEncoding.encode([("flow", flow.idString), ("status", flow.status)]), status: .seeOther)
        }
        let (status, title, message): (HTTPResponse.Status, String, String) =
            switch flow.status {
            case "completed": (.ok, "Signed in", "You are signed in. You can close this page and return to the app.")
            case "failed": (.forbidden, "Sign-in failed", "The sign-in did not succeed. Return to the app and try again.")
            case "expired": (.gone, "Sign-in expired", "This sign-in link has expired. Return to the app and start again.")
            default: (.ok, "Sign-in in progress", "The sign-in has not finished yet.")
            }
        return Page.html(status, title: title, message: message, attributes: ["data-parley-flow-status": flow.status])
    }
}
