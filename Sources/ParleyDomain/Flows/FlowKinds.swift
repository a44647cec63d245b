package import AuthFlows
package import Conversation
import Foundation
package import Logging

/// What a browser sent to a flow kind's route, already decoded by the controller: the
/// `{id}` path parameter, and the query's fields followed, for a `POST`, by the form body's.
package struct FlowInput: Sendable {
    package let id: String?
    package let fields: [(String, String)]
    /// The browser's address (the balancer's `X-Forwarded-For` only from a trusted proxy).
    package var client: String? = nil

    /// The first value of a field.
    package func value(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }

    package init(id: String? = nil, fields: [(String, String)], client: String? = nil) {
        self.id = id
        self.fields = fields
        self.client = client
    }
}

/// A browser route a flow kind serves (its callback, its form), mounted with the hosted
/// pages, outside the thin-client API. `sameOriginForm`: a `POST` that only Parley's own
/// page may send (a cross-site or same-site one is refused before the kind sees it).
package struct FlowRoute: Sendable {
    /// The methods a flow route answers.
    package enum Method: Sendable, Equatable { case get, post }

    package let path: String
    package let methods: [Method]
    package var sameOriginForm = false
    package let handler: @Sendable (FlowInput, Logger) async throws -> FlowPage

    package init(
        path: String, methods: [Method], sameOriginForm: Bool = false, handler: @escaping @Sendable (FlowInput, Logger) async throws -> FlowPage
    ) {
        self.path = path
        self.methods = methods
        self.sameOriginForm = sameOriginForm
        self.handler = handler
    }
}

/// What a kind of interactive flow does. A kind is one file under `FlowKinds/` plus one line
/// in `compose` that registers it; the order of those lines is the order in which
/// `POST /v1/flows` without `kind` picks one. The flow's life (creation, long-poll, expiry,
/// finishing once) is `FlowService`'s; what a kind keeps between pages is its own
/// `FlowKindState`, sealed in the flow row.
package protocol FlowKindHandler: Sendable {
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
    package func routes(_ kinds: FlowKinds) -> [FlowRoute] { [] }
    package func yieldsIdentity(for destination: Destination) -> Bool { false }
}

/// What the hosted upstream does with an upstream answer on the web path: forward it, complete
/// the flow, or show the done page of a flow the kind has ended (failed) itself.
package enum HostedVerdict: Sendable, Equatable { case forward, complete, ended }

/// What the hosted upstream does with a browser's form post before it goes upstream.
package enum HostedRequestVerdict: Sendable, Equatable { case forward, ended }

/// A flow kind whose browser sees the upstream through `/web/{destination}/…`.
package protocol HostedFlowKind: FlowKindHandler {
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
    package func readsFormPosts(for destination: Destination) -> Bool { false }

    package func formPosted(_ fields: [(String, String)], flow: FlowRecord, destination: Destination, logger: Logger) async throws
        -> HostedRequestVerdict
    { .forward }
}

/// A flow kind that may be waiting for a one-time passcode (`/callback/otp`).
package protocol PasscodeAwaiting: FlowKindHandler {
    /// The upstream OTP form the passcode goes to, when this flow awaits one.
    func passcodeForm(of flow: FlowRecord) throws -> String?
}

/// What every flow kind is built from: the rooms they share, made once by `compose`.
package struct FlowKindEnvironment: Sendable {
    package let flows: FlowService
    package let registrations: any RegistrationRepository
    package let conversations: Conversations
    package let secrets: Secrets
    package let hosted: HostedBinding
    package let clock: any WallClock
    package let publicURL: String

    /// The sealed state store for a kind whose state is `State`.
    package func state<State: Codable & Sendable>(_ type: State.Type) -> FlowKindState<State> {
        FlowKindState(flows: flows.flows, secrets: secrets)
    }

    package init(flows: FlowService, registrations: any RegistrationRepository, conversations: Conversations, secrets: Secrets, hosted: HostedBinding, clock: any WallClock, publicURL: String) {
        self.flows = flows
        self.registrations = registrations
        self.conversations = conversations
        self.secrets = secrets
        self.hosted = hosted
        self.clock = clock
        self.publicURL = publicURL
    }
}

/// A kind's own state, as JSON sealed into its flow's `kindState` (bound to the row), and
/// changed by compare-and-set so two browsers acting on one flow cannot lose a change.
package struct FlowKindState<State: Codable & Sendable>: Sendable {
    package static var maxAttempts: Int { 8 }

    package let flows: any FlowRepository
    package let secrets: Secrets

    /// The state the flow holds, or nil when it holds none.
    package func read(_ flow: FlowRecord) throws -> State? {
        guard let bytes = try secrets.kindState(of: flow) else { return nil }
        return try JSONDecoder().decode(State.self, from: Data(bytes))
    }

    /// Changes the state of a pending flow and files it under `callbackHash` (nil: under
    /// nothing). Returns the flow as stored afterwards, or nil when it is no longer pending.
    @discardableResult
    package func update(_ flow: FlowRecord, callbackHash: [UInt8]? = nil, _ change: (inout State?) throws -> Void) async throws -> FlowRecord? {
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

    package init(flows: any FlowRepository, secrets: Secrets) {
        self.flows = flows
        self.secrets = secrets
    }
}

/// A flow's state kept changing under one update; the caller answers with a failure page.
package enum FlowKindStateError: Error, Sendable { case contended }

/// The registered flow kinds, in the order they were registered.
package struct FlowKinds: Sendable {
    package let handlers: [any FlowKindHandler]

    /// A kind registered twice is a start-up error: which of two handlers answers a kind's pages
    /// must never be left to the order of the lines in `compose`.
    package init(_ handlers: [any FlowKindHandler]) throws(CompositionError) {
        var seen: Set<FlowKind> = []
        for handler in handlers where !seen.insert(handler.kind).inserted {
            throw CompositionError.duplicateFlowKind(handler.kind.rawValue)
        }
        self.handlers = handlers
    }

    package subscript(kind: FlowKind) -> (any FlowKindHandler)? { handlers.first { $0.kind == kind } }

    /// The registered kind called `name`, if any.
    package func kind(named name: String) -> FlowKind? { handlers.first { $0.kind.rawValue == name }?.kind }

    /// Kinds a destination offers for a proactive login, in registration order.
    package func offered(by destination: Destination) -> [FlowKind] {
        handlers.filter { $0.isOffered(by: destination) }.map(\.kind)
    }

    package var routes: [FlowRoute] { handlers.flatMap { $0.routes(self) } }
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
