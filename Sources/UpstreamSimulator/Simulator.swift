import ParleyEncoding
public import Hummingbird
public import Logging
import Foundation
import ParleyCrypto

/// Builds the SMP-like upstream. `port` 0 picks a free port: await `state.boundPort()`.
///
/// Routes:
/// - `GET /api/data` — HTTP Basic or `SMPSESSION` cookie (Basic sets one); `401` with
///   `WWW-Authenticate: Basic realm="smp"` otherwise.
/// - `GET /files/big?mb=N` — N MiB where byte i is `UInt8(i % 251)`, streamed with Content-Length.
/// - `POST|PUT /upload` — hashes the streamed body: `{"bytes":n,"sha256":"hex"}`.
/// - `POST|PUT /upload/limited` — as `/upload` for a body of at most 1 MiB by its
///   `Content-Length`; any other gets `413` at once, its body unread (a server's body-size
///   limit, as nginx's `client_max_body_size` answers).
/// - `ANY /echo/{path...}` — `{"method","path","query","headers","bodyBytes","bodySha256"}`;
///   `path` and `query` are the raw request target, header names are lower-cased.
/// - `GET /slow?ms=N` — answers after N ms.
/// - `GET /stall` — headers and a few bytes, then nothing until the client goes away.
/// - `GET /status/{code}` — answers with that status.
/// - `GET /cookies/set?n=N` — `{"cookies":N}` and N `Set-Cookie: jar<i>=<24 random characters>;
///   Path=/; HttpOnly` (i from 1; N in 0...50, `400` otherwise), to fill a client's cookie jar.
/// - SMP registration, CSRF and Basic-only uploads: `SMPRoutes.swift`; OAuth2: `OAuth2Server.swift`;
///   the SAML2 service provider at `/sp`: `SAMLServiceProvider.swift`; its mock IdP at `/idp`:
///   `MockIdP.swift`; Basic + OTP at `/basic-otp`: `BasicOTPArea.swift`; the OTP stage they
///   share: `WebMount.swift`; test controls and `GET /sim/stats`: `ControlRoutes.swift`; the demo
///   identity provider's JWKS and identity tokens: `IdentityProviderRoutes.swift`.
///
/// `state.saml` starts with the configuration's `/sp` settings and registered ACS URLs.
public func buildSimulator(
    configuration: SimulatorConfiguration = .init(),
    state: SimulatorState,
    host: String = "127.0.0.1",
    port: Int = 0,
    logger: Logger
) -> some ApplicationProtocol {
    let router = Router()
    state.saml.configure(from: configuration)
    addRoutes(to: router, configuration: configuration, state: state)
    return Application(
        router: router,
        configuration: .init(address: .hostname(host, port: port), serverName: "upstream-simulator"),
        onServerRunning: { channel in
            let actual = channel.localAddress?.port ?? port
            logger.info("upstream simulator listening", metadata: ["server.host": "\(host)", "server.port": "\(actual)"])
            state.bound(port: actual)
        },
        logger: logger
    )
}

/// Runs a simulator built by `buildSimulator` until cancelled, or with `stopOnSignals`
/// until SIGTERM/SIGINT (graceful shutdown). Afterwards `state.boundPort()` no longer waits.
public func runSimulator(_ app: some ApplicationProtocol, state: SimulatorState, stopOnSignals: Bool = false) async throws {
    defer { state.stopped() }
    if stopOnSignals {
        try await app.runService()  // ServiceGroup with SIGTERM and SIGINT
    } else {
        try await app.runService(gracefulShutdownSignals: [])
    }
}

public struct SimulatorError: Error, CustomStringConvertible {
    public let description: String
}

/// Runs a simulator on a free port of `host` for the duration of `body`, then stops it.
public func withRunningSimulator<T>(
    configuration: SimulatorConfiguration = .init(),
    host: String = "127.0.0.1",
    logger: Logger,
    _ body: (_ port: Int, _ state: SimulatorState) async throws -> T
) async throws -> T {
    let state = SimulatorState()
    let app = buildSimulator(configuration: configuration, state: state, host: host, port: 0, logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await runSimulator(app, state: state) }
        guard let port = await state.boundPort() else {
            try await group.waitForAll()
            throw SimulatorError(description: "upstream simulator stopped before listening")
        }
        let result = try await body(port, state)
        group.cancelAll()
        while let _ = try? await group.next() {}
        return result
    }
}

// MARK: Routes

/// Byte i of every generated file is `UInt8(i % 251)`. A chunk that is a whole number of
/// periods long starts every full chunk at phase 0, so one buffer serves all of them.
enum BigFile {
    static let period = 251
    static let chunkSize = period * 1024  // 257,024 bytes

    static let chunk: ByteBuffer = {
        var buffer = ByteBufferAllocator().buffer(capacity: chunkSize)
        for i in 0..<chunkSize { buffer.writeInteger(UInt8(i % period)) }
        return buffer
    }()
}

private struct DataAnswer: Encodable {
    let message: String
    let user: String
}

private struct UploadAnswer: Encodable {
    let bytes: Int
    let sha256: String
}

private struct CookiesAnswer: Encodable {
    let cookies: Int
}

private struct EchoAnswer: Encodable {
    let method: String
    let path: String
    let query: String
    let headers: [String: [String]]
    let bodyBytes: Int
    let bodySha256: String
}

private func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
    return Response(
        status: status,
        headers: [.contentType: "application/json"],
        body: .init(byteBuffer: ByteBuffer(bytes: data))
    )
}


private func isAuthorized(_ request: Request, _ configuration: SimulatorConfiguration) -> Bool {
    guard let header = request.headers[.authorization] else { return false }
    let parts = header.split(separator: " ", maxSplits: 1)
    guard parts.count == 2, parts[0].lowercased() == "basic",
        let decoded = Base64.decode(String(parts[1]).trimmingCharacters(in: .whitespaces))
    else { return false }
    let expected = Array("\(configuration.basicUsername):\(configuration.basicPassword)".utf8)
    return constantTimeEquals(decoded, expected)
}

private func addRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    router.get("/api/data") { request, _ -> Response in
        state.record("GET /api/data")
        guard let login = SMPAuth.authenticate(request, configuration, state.smp) else {
            return SMPAuth.challenge(configuration, state.smp)
        }
        return login.setCookie(on: json(DataAnswer(message: "hello", user: configuration.basicUsername)))
    }

    router.get("/files/big") { request, _ -> Response in
        state.record("GET /files/big")
        let mib = request.uri.queryParameters["mb"].flatMap { Int($0) } ?? 1
        guard (0...configuration.maxBigFileMiB).contains(mib) else {
            return SimHTTP.text("mb must be in 0...\(configuration.maxBigFileMiB)", status: .badRequest)
        }
        let total = mib << 20
        let chunk = BigFile.chunk
        return Response(
            status: .ok,
            headers: [.contentType: "application/octet-stream"],
            body: ResponseBody(contentLength: total) { writer in
                var remaining = total
                while remaining > 0 {
                    let n = min(remaining, chunk.readableBytes)
                    try await writer.write(n == chunk.readableBytes ? chunk : chunk.getSlice(at: chunk.readerIndex, length: n)!)
                    remaining -= n
                }
                try await writer.finish(nil)
            }
        )
    }

    for method in [HTTPRequest.Method.post, .put] {
        router.on("/upload", method: method) { request, _ -> Response in
            state.record("\(method.rawValue) /upload")
            let (count, digest) = try await SimHTTP.digest(request.body)
            return json(UploadAnswer(bytes: count, sha256: digest))
        }
        router.on("/upload/limited", method: method) { request, _ -> Response in
            state.record("\(method.rawValue) /upload/limited")
            guard let length = request.headers[.contentLength].flatMap(Int.init), length <= 1 << 20 else {
                return Response(status: .contentTooLarge, headers: [.connection: "close"], body: .init(byteBuffer: ByteBuffer(string: "too large\n")))
            }
            let (count, digest) = try await SimHTTP.digest(request.body)
            return json(UploadAnswer(bytes: count, sha256: digest))
        }
    }

    let echoMethods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete, .options]
    for method in echoMethods {
        router.on("/echo/**", method: method) { request, _ -> Response in
            state.record("ANY /echo")
            let target = request.head.path ?? "/"
            let path: Substring
            let query: Substring
            if let mark = target.firstIndex(of: "?") {
                path = target[..<mark]
                query = target[target.index(after: mark)...]
            } else {
                path = target[...]
                query = ""
            }
            var headers: [String: [String]] = [:]
            // HTTPTypes keeps Host as the :authority pseudo-header.
            if let authority = request.head.authority { headers["host"] = [authority] }
            for field in request.headers {
                headers[field.name.canonicalName, default: []].append(field.value)
            }
            let (count, digest) = try await SimHTTP.digest(request.body)
            return json(
                EchoAnswer(
                    method: request.method.rawValue, path: String(path), query: String(query),
                    headers: headers, bodyBytes: count, bodySha256: digest
                ))
        }
    }

    router.get("/slow") { request, _ -> Response in
        state.record("GET /slow")
        let ms = request.uri.queryParameters["ms"].flatMap { Int($0) } ?? 1000
        guard (0...configuration.maxSlowMilliseconds).contains(ms) else {
            return SimHTTP.text("ms must be in 0...\(configuration.maxSlowMilliseconds)", status: .badRequest)
        }
        state.record("GET /slow?ms=\(ms)")  // so a test can tell one call from the others
        try await Task.sleep(for: .milliseconds(ms))
        return SimHTTP.text("slow: \(ms) ms")
    }

    router.get("/stall") { request, _ -> Response in
        state.record("GET /stall")
        let requestBody = request.body
        return Response(
            status: .ok,
            headers: [.contentType: "application/octet-stream"],
            body: ResponseBody { writer in
                state.stallOpened()
                do {
                    try await writer.write(ByteBuffer(string: "stalling"))
                    // Holds the response open until the client closes its side.
                    try await requestBody.consumeWithCancellationOnInboundClose { _ in
                        try await Task.sleep(for: .seconds(86_400))
                    }
                } catch {
                    state.stallClosed(abandoned: true)
                    throw error
                }
                state.stallClosed(abandoned: false)
                try await writer.finish(nil)
            }
        )
    }

    router.get("/cookies/set") { request, _ -> Response in
        state.record("GET /cookies/set")
        guard let count = request.uri.queryParameters["n"].flatMap({ Int($0) }), (0...50).contains(count) else {
            return SimHTTP.text("n must be in 0...50", status: .badRequest)
        }
        var response = json(CookiesAnswer(cookies: count))
        for i in 0..<count {
            // 18 random bytes are 24 base64url characters, all of them valid in a cookie value.
            response.headers[values: .setCookie].append("jar\(i + 1)=\(SecureRandom.token(byteCount: 18)); Path=/; HttpOnly")
        }
        return response
    }

    router.get("/status/{code}") { _, context -> Response in
        state.record("GET /status")
        guard let code = context.parameters.get("code", as: Int.self), (200...599).contains(code) else {
            return SimHTTP.text("status must be in 200...599", status: .badRequest)
        }
        let status = HTTPResponse.Status(code: code)
        if code == 204 || code == 304 {
            return Response(status: status)
        }
        return SimHTTP.text("status \(code)", status: status)
    }

    addSMPRoutes(to: router, configuration: configuration, state: state)
    addOAuth2Routes(to: router, configuration: configuration, state: state)
    addServiceProviderRoutes(to: router, configuration: configuration, state: state)
    addIdPRoutes(to: router, configuration: configuration, state: state)
    addBasicOTPRoutes(to: router, configuration: configuration, state: state)
    addControlRoutes(to: router, configuration: configuration, state: state)
    addIdentityProviderRoutes(to: router, configuration: configuration, state: state)
    addDemoWebAppRoutes(to: router, state: state)
}
