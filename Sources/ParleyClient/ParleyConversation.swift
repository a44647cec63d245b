public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// One destination of one Parley, as an app sees it: in the spirit of the seeds' conversation
/// manager, but thin, because Parley does the conversation. It registers (keeping the client
/// token in a `TokenStorage`), sends the app's requests through `/v1/proxy`, and when a person
/// must sign in (or step up, or reconnect) hands the flow to a `SignInPresenter`, waits for the
/// flow and sends the request once more.
///
/// Only Foundation's `URLSession` is used (FoundationNetworking on Linux). Bodies stream both
/// ways through files: `upload(_:fromFile:)` and `download(_:)`.
public actor ParleyConversation {
    public let parleyURL: URL
    public let destination: String
    private let storage: any TokenStorage
    private let presenter: (any SignInPresenter)?
    private let session: URLSession
    /// How long a call waits for a flow the presenter returned from (Parley's long-poll, at
    /// most 60 s a round, until the flow leaves `pending`).
    public let flowWait: Duration

    /// The storage key: one token per Parley and destination.
    private var key: String { parleyURL.absoluteString + "#" + destination }

    public init(
        parleyURL: URL, destination: String, storage: any TokenStorage = MemoryTokenStorage(), presenter: (any SignInPresenter)? = nil,
        session: URLSession = .shared, flowWait: Duration = .seconds(600)
    ) {
        self.flowWait = flowWait
        self.parleyURL = parleyURL
        self.destination = destination
        self.storage = storage
        self.presenter = presenter
        self.session = session
    }

    // MARK: registration

    /// Whether a client token is kept for this destination.
    public var isRegistered: Bool {
        get async { (try? await storage.token(for: key)) != nil }
    }

    /// Registers with the destination (`POST /v1/registrations`) and keeps the client token. A
    /// registration that needs a person first (`login_required`) is presented and waited for.
    @discardableResult
    public func register(_ request: RegistrationRequest = RegistrationRequest(), enrolmentSecret: String? = nil) async throws -> Registration {
        var call = URLRequest(url: endpoint("/v1/registrations"))
        call.httpMethod = "POST"
        call.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let enrolmentSecret { call.setValue(enrolmentSecret, forHTTPHeaderField: "Parley-Enrolment") }
        call.httpBody = try JSONEncoder().encode(RegistrationBody(destination: destination, request: request))
        let (data, response) = try await exchange(call)
        guard response.statusCode == 201 else { throw ParleyError.from(response, body: data) }
        struct Created: Decodable { var clientToken: String? }
        guard let token = try JSONDecoder.parley.decode(Created.self, from: data).clientToken else {
            throw ParleyError.invalidAnswer("the registration's answer has no clientToken")
        }
        try await storage.setToken(token, for: key)
        var registration = try decode(Registration.self, data)
        if let flow = registration.flow, flow.isPending, let presenter {
            try await signIn(flow, presenter: presenter)
            registration = try await self.registration()
        }
        return registration
    }

    /// The registration as Parley has it now (`GET /v1/registrations/me`); with `waitingUpTo`, as
    /// soon as its status changes (a reconnect, say), at most 60 s.
    public func registration(waitingUpTo wait: Duration? = nil) async throws -> Registration {
        var path = "/v1/registrations/me"
        if let wait { path += "?wait=\(min(60, max(0, wait.components.seconds)))" }
        let (data, response) = try await authorized(URLRequest(url: endpoint(path)))
        guard response.statusCode == 200 else { throw ParleyError.from(response, body: data) }
        return try decode(Registration.self, data)
    }

    /// Deletes the registration (`DELETE /v1/registrations/me`) and forgets its token.
    public func deregister() async throws {
        var call = URLRequest(url: endpoint("/v1/registrations/me"))
        call.httpMethod = "DELETE"
        let (data, response) = try await authorized(call)
        guard response.statusCode == 204 || response.statusCode == 401 else {
            throw ParleyError.from(response, body: data)
        }
        try await storage.removeToken(for: key)
    }

    // MARK: calls through the proxy

    /// The proxy's URL for `path` below the destination (`"orders?$top=5"`).
    public func url(_ path: String) -> URL {
        let trimmed = path.drop { $0 == "/" }
        return URL(string: parleyURL.absoluteString.trimmingSuffix("/") + "/v1/proxy/" + trimmed) ?? parleyURL
    }

    /// Sends `request` through the proxy and answers the upstream's answer, whatever its status.
    /// Its URL is the proxy's (`url(_:)`), or any URL whose path and query are taken below the
    /// destination. A call that needs a person is presented and sent once more.
    public func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        try await withSignIn {
            let (data, response) = try await self.authorized(self.proxied(request))
            return (data, response, data)
        }
    }

    /// As `send`, with the body streamed from `file` (sent again from the file after a sign-in).
    public func upload(_ request: URLRequest, fromFile file: URL) async throws -> (Data, HTTPURLResponse) {
        try await withSignIn {
            let (data, response) = try await self.authorized(self.proxied(request), uploading: file)
            return (data, response, data)
        }
    }

    /// As `send`, with the answer's body streamed into a temporary file the caller then owns.
    public func download(_ request: URLRequest) async throws -> (URL, HTTPURLResponse) {
        try await withSignIn {
            let (file, response) = try await self.authorizedDownload(self.proxied(request))
            // A problem answer is small: read, so that it can be told from the upstream's answer.
            let problem = Self.mayBeProblem(response) ? FileManager.default.contents(atPath: file.path) : nil
            return (file, response, problem)
        }
    }

    /// Waits for `flow` to leave `pending` (Parley's long-poll), at most `flowWait`.
    public func wait(for flow: Flow) async throws -> Flow {
        let deadline = ContinuousClock.now + flowWait
        var current = flow
        while current.isPending && ContinuousClock.now < deadline {
            let (data, response) = try await authorized(URLRequest(url: endpoint("/v1/flows/\(flow.id)?wait=60")))
            guard response.statusCode == 200 else { throw ParleyError.from(response, body: data) }
            current = try decode(Flow.self, data)
        }
        return current
    }

    // MARK: inside

    /// Runs `call`; on `401 interaction_required` presents the flow, waits for it and runs `call`
    /// once more. Any other problem answer of Parley's becomes its typed error; an upstream's
    /// answer is returned as it is.
    /// `call` answers its result, the response, and the body when it may be a problem.
    private func withSignIn<T: Sendable>(_ call: () async throws -> (T, HTTPURLResponse, Data?)) async throws -> (T, HTTPURLResponse) {
        var attempt = 0
        while true {
            let (result, response, body) = try await call()
            guard let body, Self.isParleysProblem(response, body: body) else { return (result, response) }
            if let file = result as? URL { try? FileManager.default.removeItem(at: file) }
            let error = ParleyError.from(response, body: body)
            guard case .interactionRequired(let flow, _) = error, attempt == 0, let presenter else { throw error }
            try await signIn(flow, presenter: presenter)
            attempt += 1
        }
    }

    /// Presents `flow` and waits for its end on Parley's side; completed, or a typed error.
    private func signIn(_ flow: Flow, presenter: any SignInPresenter) async throws {
        try await presenter.present(flow)
        let ended = try await wait(for: flow)
        switch ended.status {
        case "completed": return
        case "expired": throw ParleyError.flowExpired(ended)
        case "pending": throw ParleyError.interactionRequired(ended, detail: "the sign-in was not completed in time")
        default: throw ParleyError.flowFailed(ended)
        }
    }

    private func proxied(_ request: URLRequest) -> URLRequest {
        var proxied = request
        guard let url = request.url else { return proxied }
        let base = parleyURL.absoluteString.trimmingSuffix("/") + "/v1/proxy/"
        if !url.absoluteString.hasPrefix(base) {
            let components = URLComponents(url: url, resolvingAgainstBaseURL: true)
            var path = components?.percentEncodedPath ?? ""
            if let query = components?.percentEncodedQuery { path += "?" + query }
            proxied.url = self.url(path)
        }
        return proxied
    }

    /// `request` with the registration's client token.
    private func withToken(_ request: URLRequest) async throws -> URLRequest {
        guard let token = try await storage.token(for: key) else { throw ParleyError.notRegistered }
        var request = request
        request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization")
        return request
    }

    private func authorized(_ request: URLRequest, uploading file: URL? = nil) async throws -> (Data, HTTPURLResponse) {
        try await exchange(try await withToken(request), uploading: file)
    }

    private func authorizedDownload(_ request: URLRequest) async throws -> (URL, HTTPURLResponse) {
        let (file, response) = try await session.download(for: try await withToken(request))
        guard let http = response as? HTTPURLResponse else { throw ParleyError.invalidAnswer("not an HTTP answer") }
        // The system removes its download file when this returns: keep a copy the caller owns.
        let kept = FileManager.default.temporaryDirectory.appendingPathComponent("parley-" + UUID().uuidString)
        try FileManager.default.moveItem(at: file, to: kept)
        return (kept, http)
    }

    private func exchange(_ request: URLRequest, uploading file: URL? = nil) async throws -> (Data, HTTPURLResponse) {
        let (data, response): (Data, URLResponse)
        if let file {
            (data, response) = try await session.upload(for: request, fromFile: file)
        } else {
            (data, response) = try await session.data(for: request)
        }
        guard let http = response as? HTTPURLResponse else { throw ParleyError.invalidAnswer("not an HTTP answer") }
        return (data, http)
    }

    private func endpoint(_ path: String) -> URL {
        URL(string: parleyURL.absoluteString.trimmingSuffix("/") + path) ?? parleyURL
    }

    private func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do {
            return try JSONDecoder.parley.decode(type, from: data)
        } catch {
            throw ParleyError.invalidAnswer("an answer did not decode as \(T.self): \(error)")
        }
    }

    /// Whether an answer may be a problem (`application/problem+json`).
    static func mayBeProblem(_ response: HTTPURLResponse) -> Bool {
        (response.value(forHTTPHeaderField: "Content-Type") ?? "").hasPrefix("application/problem+json")
    }

    /// Whether an answer is Parley's own problem, not an upstream's passed through: its `type`
    /// is one of Parley's problem types.
    static func isParleysProblem(_ response: HTTPURLResponse, body: Data) -> Bool {
        guard mayBeProblem(response) else { return false }
        struct Typed: Decodable { var type: String? }
        return (try? JSONDecoder().decode(Typed.self, from: body))?.type?.hasPrefix("https://parley.dev/problems/") == true
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        var text = self
        while text.hasSuffix(suffix) { text.removeLast(suffix.count) }
        return text
    }
}

/// `POST /v1/registrations`'s body: the destination beside the request's own members.
private struct RegistrationBody: Encodable {
    let destination: String
    let request: RegistrationRequest

    enum CodingKeys: String, CodingKey { case destination }

    func encode(to encoder: any Encoder) throws {
        try request.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(destination, forKey: .destination)
    }
}
