import ParleyEncoding
public import Logging
import Tracing

/// Why a conversation ended without a response. `description` is safe to log.
public struct ConversationError: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        case restartLimitExceeded
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "ConversationError(\(code)): \(detail)" }
}

/// The end of a conversation.
public enum ConversationResult: Sendable {
    case response(UpstreamResponse)
    case interactionRequired(InteractionRequest)
}

/// Who a manager's conversations run for (a registration). Filters and observers read it from
/// the conversation, so that one filter object serves every registration of a destination: a
/// registration's manager is then its session and its party, around parts its destination shares.
public protocol ConversationParty: AnyObject, Sendable {
    /// The registration's id as text (what its tokens, CSRF tokens and cookies are filed under).
    var id: String { get }
}

/// The server-side HttpConversationManager: runs conversations through request
/// filters, the transport, challenge filters and response filters, restarting as
/// filters ask, at most `maxRestarts` times. Immutable: the filter chains are
/// built once, and any number of conversations run on one manager at once.
public struct ConversationManager: Sendable {
    /// What the managers of one destination share: the transport, the filter chains, the
    /// observers, and how conversations run.
    private final class Shared: Sendable {
        let transport: any Transport
        let requestFilters: [any RequestFilter]
        let challengeFilters: [any ChallengeFilter]
        let responseFilters: [any ResponseFilter]
        let observers: [any ConversationObserver]
        let maxRestarts: Int
        let logger: Logger
        let propagateTraceContext: Bool
        let isSideRequestManager: Bool

        init(
            transport: any Transport, requestFilters: [any RequestFilter], challengeFilters: [any ChallengeFilter],
            responseFilters: [any ResponseFilter], observers: [any ConversationObserver], maxRestarts: Int, logger: Logger,
            propagateTraceContext: Bool, isSideRequestManager: Bool
        ) {
            self.transport = transport
            self.requestFilters = requestFilters
            self.challengeFilters = challengeFilters
            self.responseFilters = responseFilters
            self.observers = observers
            self.maxRestarts = maxRestarts
            self.logger = logger
            self.propagateTraceContext = propagateTraceContext
            self.isSideRequestManager = isSideRequestManager
        }

        func droppingRequestFilters(_ count: Int) -> Shared {
            Shared(
                transport: transport, requestFilters: Array(requestFilters.dropFirst(count)), challengeFilters: challengeFilters,
                responseFilters: responseFilters, observers: observers, maxRestarts: maxRestarts, logger: logger,
                propagateTraceContext: propagateTraceContext, isSideRequestManager: true)
        }
    }

    /// What the manager is, held by reference: a manager is cached per registration and handed
    /// to every conversation and to every filter's view of one, and a copy is then one
    /// reference. Its own part is the session and the party; the rest is its destination's.
    ///
    /// The session is kept in parts: the jar and headers are the registration's; its TLS options
    /// and timeouts are usually its destination's (the template's), and only where they differ
    /// (a registration's own client certificate) does it hold them, boxed.
    private final class Core: Sendable {
        let shared: Shared
        let party: (any ConversationParty)?
        let cookieJar: (any CookieStorage)?
        let headers: HeaderFields
        /// The template's session (`tls`, `timeouts`), or this manager's own where they differ.
        let settings: Settings

        final class Settings: Sendable {
            let tls: TLSOptions
            let timeouts: Timeouts

            init(tls: TLSOptions, timeouts: Timeouts) {
                self.tls = tls
                self.timeouts = timeouts
            }
        }

        /// `settings` are reused when the session's are the same.
        init(shared: Shared, session: SessionConfiguration, party: (any ConversationParty)?, settings known: Settings? = nil) {
            self.shared = shared
            self.party = party
            cookieJar = session.cookieJar
            headers = session.headers
            if let known, known.tls == session.tls, known.timeouts == session.timeouts {
                settings = known
            } else {
                settings = Settings(tls: session.tls, timeouts: session.timeouts)
            }
        }

        var session: SessionConfiguration {
            SessionConfiguration(cookieJar: cookieJar, headers: headers, tls: settings.tls, timeouts: settings.timeouts)
        }
    }

    private let core: Core

    public var transport: any Transport { core.shared.transport }
    public var session: SessionConfiguration { core.session }
    /// Who the conversations run for; nil for a manager of no registration.
    public var party: (any ConversationParty)? { core.party }
    public var requestFilters: [any RequestFilter] { core.shared.requestFilters }
    public var challengeFilters: [any ChallengeFilter] { core.shared.challengeFilters }
    public var responseFilters: [any ResponseFilter] { core.shared.responseFilters }
    public var observers: [any ConversationObserver] { core.shared.observers }
    public var maxRestarts: Int { core.shared.maxRestarts }
    public var logger: Logger { core.shared.logger }
    /// Whether exchanges carry W3C trace context (`traceparent`) upstream: the destination's
    /// `propagateTraceContext`. Without a recording span (traces off) nothing is added.
    public var propagateTraceContext: Bool { core.shared.propagateTraceContext }
    /// True for the copy a filter's side requests run on (a CSRF token fetch): an observer
    /// that counts the client's conversations leaves theirs out.
    public var isSideRequestManager: Bool { core.shared.isSideRequestManager }

    public init(
        transport: any Transport,
        session: SessionConfiguration = SessionConfiguration(),
        requestFilters: [any RequestFilter] = [],
        challengeFilters: [any ChallengeFilter] = [],
        responseFilters: [any ResponseFilter] = [],
        observers: [any ConversationObserver] = [],
        maxRestarts: Int = 4,
        logger: Logger = Logger(label: "parley.conversation"),
        propagateTraceContext: Bool = false,
        party: (any ConversationParty)? = nil
    ) {
        self.init(
            core: Core(
                shared: Shared(
                    transport: transport, requestFilters: requestFilters, challengeFilters: challengeFilters,
                    responseFilters: responseFilters, observers: observers, maxRestarts: maxRestarts, logger: logger,
                    propagateTraceContext: propagateTraceContext, isSideRequestManager: false),
                session: session, party: party))
    }

    private init(core: Core) { self.core = core }

    /// A manager with this one's filters, observers and transport (the same objects, shared)
    /// and a session and party of its own: a registration's manager made from its destination's.
    public func serving(_ party: (any ConversationParty)?, session: SessionConfiguration) -> ConversationManager {
        ConversationManager(core: Core(shared: core.shared, session: session, party: party, settings: core.settings))
    }

    /// A copy without the first `count` request filters (the seed's side-request manager).
    public func droppingRequestFilters(_ count: Int) -> ConversationManager {
        ConversationManager(
            core: Core(shared: core.shared.droppingRequestFilters(count), session: core.session, party: core.party, settings: core.settings))
    }

    /// Whether a conversation can send its request more than once: a filter that answers a
    /// challenge or restarts the conversation, or one that can ask for a person (whose
    /// sign-in sends the request again). Without any, the body is sent once and need not
    /// be kept for a replay.
    public var mayResend: Bool {
        !requestFilters.isEmpty || !challengeFilters.isEmpty || !responseFilters.isEmpty
    }

    /// Runs one conversation to its final response. The returned body has not
    /// been read; the caller streams it.
    public func execute(_ request: UpstreamRequest, id: String = ConversationManager.newID()) async throws
        -> ConversationResult
    {
        let conversation = Conversation(id: id, manager: self)
        do {
            return try await run(request, conversation: conversation)
        } catch {
            for observer in observers { observer.observe(.failed(error), conversation: conversation) }
            throw error
        }
    }

    /// The restart loop of one conversation.
    private func run(_ request: UpstreamRequest, conversation: Conversation) async throws -> ConversationResult {
        let id = conversation.id
        var logger = self.logger
        // Only debug lines use the logger below: skip the metadata copy otherwise.
        if logger.logLevel <= .debug { logger[metadataKey: "conversation.id"] = .string(id) }
        var credential: Credential?
        var attempt = 0
        while true {
            try Task.checkCancellation()
            var outgoing = request
            for header in core.headers { outgoing.headers.set(header.name, header.value) }
            if outgoing.tls == TLSOptions() { outgoing.tls = core.settings.tls }
            if outgoing.timeouts == Timeouts() { outgoing.timeouts = core.settings.timeouts }

            for (index, filter) in requestFilters.enumerated() {
                let view = conversation.dropping(index + 1)
                let decision = try await filter.prepare(&outgoing, conversation: view)
                if case .interactionRequired(let interaction) = decision {
                    finish(conversation, status: nil)
                    return .interactionRequired(interaction)
                }
            }
            if let credential { outgoing.headers.set("Authorization", credential.headerValue) }

            // One span per exchange, open until this attempt's fate is known (a restart is its event).
            let span = ExchangeTrace.start(outgoing, attempt: attempt)
            defer { span.end() }
            let response: UpstreamResponse
            do {
                if span.isRecording {
                    response = try await ServiceContext.$current.withValue(span.context) {
                        try await exchange(outgoing, conversation: conversation, attempt: attempt, span: span)
                    }
                } else {
                    response = try await exchange(outgoing, conversation: conversation, attempt: attempt, span: span)
                }
            } catch {
                span.recordError(error)
                span.setStatus(SpanStatus(code: .error))
                throw error
            }
            var final = response

            if response.status == 401, let space = ProtectionSpace(response: response, url: outgoing.url) {
                let challenge = Challenge(
                    protectionSpace: space, previousFailureCount: conversation.previousFailureCount(for: space),
                    request: outgoing, status: response.status, headers: response.headers)
                switch try await answer(challenge, conversation: conversation) {
                case .retry(let newCredential):
                    conversation.recordAttempt(for: space)
                    credential = newCredential
                    response.body.discard()
                    try restart(conversation, attempt: &attempt, reason: .challenge(space.method), logger: logger, span: span)
                    continue
                case .fail(let error):
                    response.body.discard()
                    finish(conversation, status: nil)
                    throw error
                case .interactionRequired(let interaction):
                    response.body.discard()
                    finish(conversation, status: nil)
                    return .interactionRequired(interaction)
                case .notHandled:
                    break
                }
            }

            var restartReason: RestartReason?
            for filter in responseFilters {
                switch try await filter.inspect(&final, request: outgoing, conversation: conversation) {
                case .deliver:
                    continue
                case .restart(let reason):
                    restartReason = reason
                case .interactionRequired(let interaction):
                    final.body.discard()
                    finish(conversation, status: nil)
                    return .interactionRequired(interaction)
                }
                break
            }
            if let restartReason {
                final.body.discard()
                try restart(conversation, attempt: &attempt, reason: restartReason, logger: logger, span: span)
                continue
            }
            finish(conversation, status: final.status)
            return .response(final)
        }
    }

    /// One exchange on the wire, with the session's cookies.
    private func exchange(_ request: UpstreamRequest, conversation: Conversation, attempt: Int, span: any Span) async throws
        -> UpstreamResponse
    {
        var request = request
        if propagateTraceContext { ExchangeTrace.inject(span, into: &request.headers) }
        if let jar = core.cookieJar {
            if let cookie = try await jar.cookieHeader(for: request.url) {
                request.headers.set("Cookie", cookie)
            } else {
                request.headers.remove("Cookie")
            }
        }
        for observer in observers {
            observer.observe(.sending(method: request.method, url: request.url, attempt: attempt), conversation: conversation)
        }
        let response = try await transport.send(request)
        ExchangeTrace.received(response.status, on: span)
        for observer in observers { observer.observe(.received(status: response.status, url: request.url), conversation: conversation) }
        if let jar = core.cookieJar {
            let setCookies = response.headers.values("Set-Cookie")
            if !setCookies.isEmpty { try await jar.store(setCookies: setCookies, from: request.url) }
        }
        return response
    }

    private func answer(_ challenge: Challenge, conversation: Conversation) async throws -> ChallengeDecision {
        for filter in challengeFilters {
            let decision = try await filter.handle(challenge, conversation: conversation)
            if case .notHandled = decision { continue }
            return decision
        }
        return .notHandled
    }

    private func restart(_ conversation: Conversation, attempt: inout Int, reason: RestartReason, logger: Logger, span: any Span) throws {
        let count = conversation.recordRestart()
        ExchangeTrace.restarting(reason.description, count: count, on: span)
        attempt += 1
        for observer in observers { observer.observe(.restarting(reason: reason), conversation: conversation) }
        logger.debug("conversation restarts", metadata: ["restart.reason": .string(reason.description), "restart.count": "\(count)"])
        guard count <= maxRestarts else {
            finish(conversation, status: nil)
            throw ConversationError(.restartLimitExceeded, detail: "the conversation restarted \(count - 1) times; last reason: \(reason)")
        }
    }

    private func finish(_ conversation: Conversation, status: Int?) {
        for observer in observers { observer.observe(.finished(status: status), conversation: conversation) }
    }

    public static func newID() -> String { LocalID.next() }
}

extension Credential {
    var headerValue: String {
        switch self {
        case .basic(let username, let password):
            "Basic " + Base64.encode(Array("\(username):\(password)".utf8))
        case .authorization(let value):
            value
        }
    }
}

extension ProtectionSpace {
    /// The space a `401` names in its first `WWW-Authenticate` challenge.
    init?(response: UpstreamResponse, url: String) {
        guard let header = response.headers["WWW-Authenticate"] else { return nil }
        let scheme = header.split(separator: " ", maxSplits: 1).first.map { $0.lowercased() } ?? ""
        let method: Method =
            switch scheme {
            case "basic": .basic
            case "bearer": .bearer
            case "negotiate": .negotiate
            default: .other
            }
        var realm: String?
        if let range = header.range(of: "realm=\"") {
            let rest = header[range.upperBound...]
            realm = rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }
        self.init(method: method, realm: realm, origin: URLParts(url)?.origin ?? url)
    }
}
