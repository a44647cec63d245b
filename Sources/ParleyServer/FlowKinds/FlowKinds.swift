import AuthFlows
import Conversation
import Hummingbird

/// A browser route a flow kind serves (its callback, a hosted upstream), mounted
/// with the hosted pages, outside the thin-client API.
struct FlowRoute: Sendable {
    let path: String
    let methods: [HTTPRequest.Method]
    let handler: @Sendable (Request, ParleyRequestContext) async throws -> Response
}

/// What a kind of interactive flow does in the browser. One file per kind under
/// `FlowKinds/`, one line in `buildApplication` to register it; the flow's life
/// (creation, long-poll, expiry, finishing once) is `FlowService`'s.
protocol FlowKindHandler: Sendable {
    var kind: FlowKind { get }
    /// Whether a destination offers this kind for a proactive login (`POST /v1/flows`).
    func isOffered(by destination: Destination) -> Bool
    /// The scope key a proactive flow of this kind files its result under, if any.
    func scopeKey(for destination: Destination) -> String?
    /// The start page of a pending flow whose secret (`secret`, from its URL) checked out.
    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> Response
    /// Callbacks and other browser routes this kind needs.
    var routes: [FlowRoute] { get }
}

/// What the hosted upstream does after an upstream answer.
enum HostedVerdict: Sendable { case forward, complete }

/// A flow kind whose browser sees the upstream through `/web/{destination}/…`.
protocol HostedFlowKind: FlowKindHandler {
    /// Looks at each upstream answer on the web path: is the flow's finish condition met?
    func verdict(
        requestURL: String, response: inout UpstreamResponse, flow: FlowRecord, destination: Destination
    ) async throws -> HostedVerdict
}

/// The registered flow kinds.
struct FlowKinds: Sendable {
    /// Without `kind`, `POST /v1/flows` takes the first offered in this order.
    static let preference: [FlowKind] = [.saml2, .oauth2, .basic]

    let handlers: [FlowKind: any FlowKindHandler]

    init(_ handlers: [any FlowKindHandler]) {
        self.handlers = Dictionary(handlers.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
    }

    subscript(kind: FlowKind) -> (any FlowKindHandler)? { handlers[kind] }

    /// Kinds a destination offers for a proactive login, in the contract's order.
    func offered(by destination: Destination) -> [FlowKind] {
        Self.preference.filter { handlers[$0]?.isOffered(by: destination) == true }
    }

    var routes: [FlowRoute] {
        handlers.keys.sorted { $0.rawValue < $1.rawValue }.flatMap { handlers[$0]?.routes ?? [] }
    }
}
