import Hummingbird
import ParleyDomain

/// The controllers of one instance, built once by `buildApplication`.
struct Controllers: Sendable {
    let operations: OperationsController
    let registrations: RegistrationsController
    let registrationAdmission: RegistrationAdmission
    let flows: FlowsController
    let flowPages: FlowPagesController
    let proxy: ProxyController
    let proxyAdmission: ProxyAdmission
    let flowAdmission: FlowAdmission
    let hostedUpstreamAdmission: HostedUpstreamAdmission
    let adminAuthenticator: AdminAuthenticator
    let admin: AdminController
    let hostedUpstream: HostedUpstreamController
    /// Browser routes of the registered flow kinds (`/callback/oauth2`, …).
    let flowRoutes: [FlowRoute]
    /// The hand-over to the web origin, when the hosted upstream has one (`PARLEY_WEB_PUBLIC_URL`).
    var webHandover: WebHandoverController? = nil
    /// Agents' access tokens on `/v1`, and the challenge every `401` there carries.
    let agents: AgentAccess
    /// The pages' stylesheet and logos.
    let pageAssets: PageAssets
    /// OpenID Connect Back-Channel Logout from the listed identity providers.
    let backChannelLogout: BackChannelLogoutController
    /// The rate limit of Parley's own pages and callbacks, per client address.
    let pageAdmission: PageAdmission
    let limits: RateLimits
    /// Browser apps' cookie sessions (`browserApps`).
    let browserSession: BrowserSession
}

/// Every path Parley serves, in one place. Who may call a group is decided by its
/// authenticator, so a handler that needs a registration (or an admin) cannot be
/// reached without one.
func addRoutes(
    to router: Router<ParleyRequestContext>, _ c: Controllers, clientTokens: ClientTokens
) {
    // Operations: load balancers and operators, no authentication.
    router.get("/healthz", use: c.operations.health)
    router.get("/readyz", use: c.operations.ready)
    router.get("/metrics", use: c.operations.metricsText)
    router.get("/openapi.json", use: c.operations.openAPI)
    router.get("/.well-known/jwks.json", use: c.operations.jwks)
    router.get("/.well-known/saml-metadata.xml", use: c.operations.samlMetadata)
    router.get("/.well-known/oauth-protected-resource", use: c.operations.protectedResource)
    // Parley's pages, callbacks and the identity providers' logout: no authentication, and each
    // request costs a database query, so each client address has a rate limit.
    let pages = router.group().add(middleware: c.pageAdmission)
    // Identity providers: a user's sessions ended (the logout token's signature is its authentication).
    router.group().add(middleware: c.pageAdmission.answeringJSON).post("/backchannel-logout", use: c.backChannelLogout.logout)

    // Thin clients. Registering needs no token; everything else needs the client token (or an
    // agent's access token). Every 401 here names Parley's protected-resource metadata.
    let challenge = ResourceChallenge(agents: c.agents)
    router.group("/v1/registrations").add(middleware: challenge).add(middleware: c.registrationAdmission).post(use: c.registrations.create)
    let client = router.group("/v1")
        .add(middleware: challenge)
        .add(middleware: ClientAuthenticator(clientTokens: clientTokens, cached: false, agents: c.agents, limits: c.limits, session: c.browserSession))
        .group(context: ClientRequestContext.self)
    client.get("registrations/me", use: c.registrations.me)
    client.delete("registrations/me", use: c.registrations.delete)
    client.put("registrations/me/identity", use: c.registrations.renewIdentity)
    client.group("flows").add(middleware: c.flowAdmission).post(use: c.flows.create)
    client.get("flows/{id}", use: c.flows.status)

    // The proxy: any forwarded method, the raw target judged by the handler.
    let proxy = router.group("/v1/proxy")
        .add(middleware: challenge)
        .add(middleware: ClientAuthenticator(clientTokens: clientTokens, cached: true, agents: c.agents, limits: c.limits, session: c.browserSession))
        .add(middleware: c.proxyAdmission)
        .group(context: ProxyRequestContext.self)
    for method in ProxyController.methods {
        proxy.on("", method: method, use: c.proxy.forward)
        proxy.on("**", method: method, use: c.proxy.forward)
    }

    // Browsers: the hosted pages every flow shares, then each flow kind's own routes.
    pages.get("/flows/{id}", use: c.flowPages.start)
    pages.post("/flows/{id}/confirm", use: c.flowPages.confirm)
    pages.get("/flows/{id}/done", use: c.flowPages.done)
    router.get("/pages/{file}", use: c.pageAssets.serve)
    // Web apps' ES module (browser apps).
    router.get("/sdk/parley.js", use: BrowserModule().serve)
    for route in c.flowRoutes {
        for method in route.methods { pages.on(RouterPath(route.path), method: method.http, use: c.flowPages.handler(for: route)) }
    }
    // The hosted upstream of saml2 and otp flows: a bound browser sees the destination here.
    let web = router.group("/web").add(middleware: c.hostedUpstreamAdmission)
    for method in ProxyController.methods {
        web.on("{destination}", method: method, use: c.hostedUpstream.handle)
        web.on("{destination}/**", method: method, use: c.hostedUpstream.handle)
    }
    // With a web origin of its own, the browser is handed over to it (`WebHandover`).
    if let handover = c.webHandover {
        pages.get("/flows/{id}/bind", use: handover.ticket)
        pages.get("/web-bind/{destination}", use: handover.bind)
    }

    // Administrators (admin token).
    let admin = router.group("/admin/v1")
        .add(middleware: c.adminAuthenticator)
        .group(context: AdminRequestContext.self)
    admin.get("registrations", use: c.admin.registrations)
    admin.get("registrations/{id}", use: c.admin.registration)
    admin.delete("registrations/{id}", use: c.admin.delete)
    admin.post("registrations/{id}/approval", use: c.admin.approve)
    admin.post("revocations", use: c.admin.revoke)
    admin.get("audit", use: c.admin.auditEvents)
    admin.get("events", use: c.admin.events)
    admin.post("events/{id}/redelivery", use: c.admin.redeliver)
}
