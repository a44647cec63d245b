public import Hummingbird
import Logging
import NIOCore
public import ParleyDomain

/// The context every request starts in: no caller known yet. Hosted pages,
/// callbacks and operations run in it. Authenticators fill in who the caller is.
public struct ParleyRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by `ClientAuthenticator` for a valid client token.
    public var registration: RegistrationRecord?
    /// Set by `AdminAuthenticator` for a valid admin token.
    public var admin: AdminIdentity?
    /// The peer's IP address (the balancer's, behind one).
    public let peerAddress: String?
    /// Set by `ProxyAdmission`: the proxied request's in-flight slot, held until its answer is written.
    var inFlight: InFlightTicket?

    public init(source: Source) {
        coreContext = .init(source: source)
        peerAddress = source.channel.remoteAddress?.ipAddress
    }
}

/// A thin client's request: a handler here cannot run without its registration.
public struct ClientRequestContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let registration: RegistrationRecord
    /// The in-flight slot `ProxyAdmission` gave a proxied request.
    let inFlight: InFlightTicket?

    public init(context: ParleyRequestContext) throws {
        guard let registration = context.registration else { throw Problem.invalidClientToken }
        coreContext = context.coreContext
        self.registration = registration
        inFlight = context.inFlight
    }
}

extension ClientRequestContext {
    /// The registration, unless it still waits for an administrator's approval (`403 forbidden`).
    func approvedRegistration() throws(Problem) -> RegistrationRecord {
        guard registration.status != .pendingApproval else {
            throw Problem(.forbidden, .forbidden, "the registration waits for an administrator's approval")
        }
        return registration
    }
}

/// An administrator's request: a handler here cannot run without the admin identity.
public struct AdminRequestContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let admin: AdminIdentity

    public init(context: ParleyRequestContext) throws {
        guard let admin = context.admin else { throw Problem.invalidAdminToken }
        coreContext = context.coreContext
        self.admin = admin
    }
}
