import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Logging

/// What a flow kind answers a browser with: a value, not an HTTP response. The pages'
/// HTTP form (headers, templates, status, language) is `Pages.response`'s alone.
enum FlowPage: Sendable {
    /// Onward to `location` (`303` unless said otherwise), setting `cookies` (whole
    /// `Set-Cookie` values) on the way.
    case redirect(String, status: HTTPResponse.Status = .seeOther, cookies: [String] = [])
    /// The Basic form's credentials page (the password is never put back).
    case credentialsForm(CredentialsForm)
    /// How a flow ended (or that it has not yet): the done page.
    case finished(FinishedPage)
    /// Something went wrong that the person can do something about; `service` is the
    /// destination's name and `age` how long ago the flow started, when they are known.
    case notice(PageNotice, service: String? = nil, age: PageAge? = nil)
    /// A page with a kind's own message (not localized); `attributes` become `data-…` attributes.
    case message(HTTPResponse.Status, title: String, message: String, attributes: [String: String])
    /// A failure without a notice of its own, shown as an HTML page with the problem's status and code.
    case failure(Problem)
    /// Who asked for this sign-in, and one button that continues it (`FlowConfirmation`).
    case confirmation(ConfirmationPage, cookies: [String])
    /// Onward to `location` after a form post, setting `cookies`: a `200` page the browser leaves
    /// at once (`Refresh: 0`, and a link). A redirect answering a post would be held to the
    /// page's `form-action 'self'` by browsers, all the way to the authorization server or IdP.
    case onward(String, cookies: [String])
}

extension FlowPage {
    /// This page as the answer to a form post: a redirect becomes `onward`.
    var answeringPost: FlowPage {
        guard case .redirect(let location, _, let cookies) = self else { return self }
        return .onward(location, cookies: cookies)
    }
}

/// What a browser sent to a flow kind's route, already decoded by the controller: the
/// `{id}` path parameter, and the query's fields followed, for a `POST`, by the form body's.
struct FlowInput: Sendable {
    let id: String?
    let fields: [(String, String)]
    /// The browser's address (the balancer's `X-Forwarded-For` only from a trusted proxy).
    var client: String? = nil

    /// The first value of a field.
    func value(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }
}

/// A browser route a flow kind serves (its callback, its form), mounted with the hosted
/// pages, outside the thin-client API. `sameOriginForm`: a `POST` that only Parley's own
/// page may send (a cross-site or same-site one is refused before the kind sees it).
struct FlowRoute: Sendable {
    let path: String
    let methods: [HTTPRequest.Method]
    var sameOriginForm = false
    let handler: @Sendable (FlowInput, Logger) async throws -> FlowPage
}

/// What a kind of interactive flow does. A kind is one file under `FlowKinds/` plus one line
/// in `compose` that registers it; the order of those lines is the order in which
/// `POST /v1/flows` without `kind` picks one. The flow's life (creation, long-poll, expiry,
/// finishing once) is `FlowService`'s; what a kind keeps between pages is its own
/// `FlowKindState`, sealed in the flow row.
protocol FlowKindHandler: Sendable {
    var kind: FlowKind { get }
    /// Whether a destination offers this kind for a proactive login (`POST /v1/flows`).
    func isOffered(by destination: Destination) -> Bool
    /// The scope key a proactive flow of this kind files its result under, if any.
    func scopeKey(for destination: Destination) -> String?
    /// The start page of a pending flow whose secret (`secret`, from its URL) checked out.
    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage
    /// Callbacks and other browser routes this kind needs; `kinds` are all registered kinds.
    func routes(_ kinds: FlowKinds) -> [FlowRoute]
    /// Whether this kind's sign-ins at `destination` say who signed in (so the binding can
    /// hold them to the registration's user); a kind that cannot is never started unasked.
    func yieldsIdentity(for destination: Destination) -> Bool
}

extension FlowKindHandler {
    func routes(_ kinds: FlowKinds) -> [FlowRoute] { [] }
    func yieldsIdentity(for destination: Destination) -> Bool { false }
}

/// What the hosted upstream does with an upstream answer on the web path: forward it, complete
/// the flow, or show the done page of a flow the kind has ended (failed) itself.
enum HostedVerdict: Sendable, Equatable { case forward, complete, ended }

/// What the hosted upstream does with a browser's form post before it goes upstream.
enum HostedRequestVerdict: Sendable, Equatable { case forward, ended }

/// A flow kind whose browser sees the upstream through `/web/{destination}/…`.
protocol HostedFlowKind: FlowKindHandler {
    /// Looks at each upstream answer on the web path (its `Location` already in the
    /// upstream's address space) and decides: forward it to the browser (the kind may change
    /// its `Location`, and its own state, e.g. to follow a second factor), or the flow is
    /// complete, or the kind ended it.
    func answer(
        _ response: inout UpstreamResponse, requestURL: String, flow: FlowRecord, destination: Destination, logger: Logger
    ) async throws -> HostedVerdict

    /// Whether this kind reads the browser's form posts on the web path for `destination`
    /// (a SAMLResponse on its way to the service provider's ACS).
    func readsFormPosts(for destination: Destination) -> Bool

    /// A browser's form post (`application/x-www-form-urlencoded`, decoded) before it goes
    /// upstream: forward it, or the kind has ended the flow and nothing is sent.
    func formPosted(_ fields: [(String, String)], flow: FlowRecord, destination: Destination, logger: Logger) async throws
        -> HostedRequestVerdict
}

extension HostedFlowKind {
    func readsFormPosts(for destination: Destination) -> Bool { false }

    func formPosted(_ fields: [(String, String)], flow: FlowRecord, destination: Destination, logger: Logger) async throws
        -> HostedRequestVerdict
    { .forward }
}

/// A flow kind that may be waiting for a one-time passcode (`/callback/otp`).
protocol PasscodeAwaiting: FlowKindHandler {
    /// The upstream OTP form the passcode goes to, when this flow awaits one.
    func passcodeForm(of flow: FlowRecord) throws -> String?
}

/// What every flow kind is built from: the rooms they share, made once by `compose`.
struct FlowKindEnvironment: Sendable {
    let flows: FlowService
    let registrations: any RegistrationRepository
    let conversations: Conversations
    let secrets: Secrets
    let hosted: HostedBinding
    let clock: any WallClock
    let publicURL: String

    /// The sealed state store for a kind whose state is `State`.
    func state<State: Codable & Sendable>(_ type: State.Type) -> FlowKindState<State> {
        FlowKindState(flows: flows.flows, secrets: secrets)
    }
}

/// A kind's own state, as JSON sealed into its flow's `kindState` (bound to the row), and
/// changed by compare-and-set so two browsers acting on one flow cannot lose a change.
struct FlowKindState<State: Codable & Sendable>: Sendable {
    static var maxAttempts: Int { 8 }

    let flows: any FlowRepository
    let secrets: Secrets

    /// The state the flow holds, or nil when it holds none.
    func read(_ flow: FlowRecord) throws -> State? {
        guard let bytes = try secrets.kindState(of: flow) else { return nil }
        return try JSONDecoder().decode(State.self, from: Data(bytes))
    }

    /// Changes the state of a pending flow and files it under `callbackHash` (nil: under
    /// nothing). Returns the flow as stored afterwards, or nil when it is no longer pending.
    @discardableResult
    func update(_ flow: FlowRecord, callbackHash: [UInt8]? = nil, _ change: (inout State?) throws -> Void) async throws -> FlowRecord? {
        var current = flow
        for _ in 0..<Self.maxAttempts {
            guard current.status == .pending else { return nil }
            var state = try read(current)
            try change(&state)
            let sealed = try state.map { secrets.seal(kindState: Array(try JSONEncoder().encode($0)), flowID: current.idString) }
            if try await flows.replaceKindState(id: current.id, expected: current.kindState, with: sealed, callbackHash: callbackHash) {
                current.kindState = sealed
                return current
            }
            guard let fresh = try await flows.find(id: flow.id) else { return nil }
            current = fresh
        }
        throw FlowKindStateError.contended
    }
}

/// A flow's state kept changing under one update; the caller answers with a failure page.
enum FlowKindStateError: Error, Sendable { case contended }

/// The registered flow kinds, in the order they were registered.
struct FlowKinds: Sendable {
    let handlers: [any FlowKindHandler]

    /// A kind registered twice is a start-up error: which of two handlers answers a kind's pages
    /// must never be left to the order of the lines in `compose`.
    init(_ handlers: [any FlowKindHandler]) throws(CompositionError) {
        var seen: Set<FlowKind> = []
        for handler in handlers where !seen.insert(handler.kind).inserted {
            throw CompositionError.duplicateFlowKind(handler.kind.rawValue)
        }
        self.handlers = handlers
    }

    subscript(kind: FlowKind) -> (any FlowKindHandler)? { handlers.first { $0.kind == kind } }

    /// The registered kind called `name`, if any.
    func kind(named name: String) -> FlowKind? { handlers.first { $0.kind.rawValue == name }?.kind }

    /// Kinds a destination offers for a proactive login, in registration order.
    func offered(by destination: Destination) -> [FlowKind] {
        handlers.filter { $0.isOffered(by: destination) }.map(\.kind)
    }

    var routes: [FlowRoute] { handlers.flatMap { $0.routes(self) } }
}

/// What stops `compose` from building a server: a mistake in how the rooms are put together,
/// reported at start with the rest (`parley serve` exits with it).
public enum CompositionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Two handlers for one flow kind.
    case duplicateFlowKind(String)

    public var description: String {
        switch self {
        case .duplicateFlowKind(let kind): "the flow kind '\(kind)' is registered twice"
        }
    }
}
