public import Hummingbird
import AuthFlows
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
    /// Set by `ProxyAdmission` and `HostedUpstreamAdmission`: the request's in-flight slot, held
    /// by the upstream's answer until its body is written (`UpstreamAnswer`), else until the
    /// request is done.
    var inFlight: InFlightTicket?
    /// Set by `ProxyAdmission`: the registration's destination, looked up once for the call.
    var destination: Destination?

    public init(source: Source) {
        coreContext = .init(source: source)
        peerAddress = source.channel.remoteAddress?.ipAddress
    }
}

/// A thin client's request: a handler here cannot run without its registration.
public struct ClientRequestContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let registration: RegistrationRecord

    public init(context: ParleyRequestContext) throws {
        guard let registration = context.registration else { throw Problem.invalidClientToken }
        coreContext = context.coreContext
        self.registration = registration
    }
}

extension ClientRequestContext {
    /// The registration, unless it still waits for an administrator's approval (`403 forbidden`).
    func approvedRegistration() throws(Problem) -> RegistrationRecord {
        try Self.approved(registration)
    }

    static func approved(_ registration: RegistrationRecord) throws(Problem) -> RegistrationRecord {
        guard registration.status != .pendingApproval else {
            throw Problem(.forbidden, .forbidden, "the registration waits for an administrator's approval")
        }
        return registration
    }
}

/// A proxied call as `ProxyAdmission` let it in, built once and carried to the end of the
/// request: the registration (approved), its destination, and the in-flight slot the answer holds
/// until its body is written.
public struct ProxyRequestContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let registration: RegistrationRecord
    let destination: Destination
    let inFlight: InFlightTicket

    public init(context: ParleyRequestContext) throws {
        guard let registration = context.registration else { throw Problem.invalidClientToken }
        let approved = try ClientRequestContext.approved(registration)
        // Admission runs before every proxied route (`Routes`); without it there is no call to make.
        guard let destination = context.destination, let inFlight = context.inFlight else {
            throw Problem(.internalServerError, .internalError, "the call was not admitted")
        }
        coreContext = context.coreContext
        self.registration = approved
        self.destination = destination
        self.inFlight = inFlight
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
