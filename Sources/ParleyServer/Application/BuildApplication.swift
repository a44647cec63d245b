import AuthFlows
import Conversation
public import Hummingbird
import HummingbirdCore
import LoopAffinity
public import Logging
public import ServiceLifecycle
public import Store
import UnixSignals
public import ParleyDomain


/// The router with every route (see `compose`).
public func buildRouter(
    configuration: ParleyConfiguration, dependencies: ParleyDependencies, metrics: Metrics, logger: Logger
) throws -> Router<ParleyRequestContext> {
    try compose(configuration: configuration, dependencies: dependencies, metrics: metrics, logger: logger).router
}

/// The domain's rooms of one instance, each built once and complete (`composeDomain`).
struct DomainRooms: Sendable {
    let secrets: Secrets
    let audit: AuditLog
    let usage: TokenUsage
    let notBefores: NotBefores
    let clientTokens: ClientTokens
    let broker: OAuth2Broker
    let configurator: DestinationConfigurator
    let binding: HostedBinding
    let conversations: Conversations
    let invalidation: CacheInvalidation
    let flows: FlowService
    let identityTokens: IdentityTokenVerifier
    let registrations: RegistrationService
    let agents: AgentAccess
    let kinds: FlowKinds
    let administration: Administration
}

/// The domain, wired once from configuration and dependencies. What it needs of the edge comes
/// in as values: the rate limits (the token endpoint's gate and the failed-login lock), the
/// cluster's share, and the contract's names for errors.
func composeDomain(
    configuration: ParleyConfiguration, dependencies d: ParleyDependencies, metrics: Metrics, limits: RateLimits, logger: Logger,
    additionalFlowKinds: [@Sendable (FlowKindEnvironment) -> any FlowKindHandler]
) throws -> DomainRooms {
    let secrets = Secrets(keyRing: configuration.keys.keyRing)
    let audit = AuditLog(repository: d.audit, logger: logger)
    let csrfTokens = CSRFTokenCache()
    let usage = TokenUsage()
    let notBefores = NotBefores(repository: d.notBefores)
    let clientTokens = ClientTokens(registrations: d.registrations)
    let news = RegistrationNews(signals: d.cacheSignals, clientTokens: clientTokens, tokens: d.tokens, notBefores: notBefores, logger: logger)
    let starter = FlowStarter(flows: d.flows, secrets: secrets, audit: audit, clock: d.clock, publicURL: configuration.server.publicURL)
    // A rejected refresh that only a person can answer: the broker reports it, `Reconnects` gives
    // the registration a fresh flow. Built from what starts flows, before the conversations exist.
    let reconnects = Reconnects(registrations: d.registrations, starter: starter, news: news, logger: logger)
    let broker = OAuth2Broker(
        store: d.tokens, clock: d.clock, events: AuditTokenEvents(audit: audit, metrics: metrics, reconnects: reconnects, events: d.events),
        callGate: limits, usage: usage,
        signer: configuration.keys.signingKeys, samlSigner: SAMLAssertionIssuing.sign, issuer: configuration.server.publicURL,
        refreshFailureReport: configuration.housekeeping.refreshFailedEventAfter,
        identityGate: { [notBefores] identity in
            try await notBefores.admits(issuer: identity.issuer, subject: identity.subject, client: identity.agentClient, issuedAt: identity.issuedAt)
        }, logger: logger)
    let configurator = DestinationConfigurator(
        transport: d.transport, cookieRecords: d.cookies, csrfTokens: csrfTokens, clock: d.clock,
        observers: [MetricsObserver(metrics: metrics)], oauth2: broker, logger: logger)
    let binding = HostedBinding(
        publicURL: configuration.server.publicURL, webURL: configuration.server.webPublicURL, secrets: secrets, clock: d.clock)
    let staging = CookieStaging(flows: d.flows, secrets: secrets, cookies: d.cookies, clock: d.clock)
    let conversations = Conversations(
        destinations: configuration.destinations, configurator: configurator,
        managers: ManagerCache(idleTimeout: configuration.timeouts.managerIdle, clock: d.clock),
        browserManagers: ManagerCache(idleTimeout: configuration.timeouts.managerIdle, clock: d.clock), secrets: secrets, cookies: d.cookies,
        csrfTokens: csrfTokens, hostedBase: { [binding] in binding.base($0) }, staging: staging,
        accounting: { [accounting = ConversationAccounting.Factory(
            destinations: configuration.destinations, limits: limits, metrics: metrics, errorNames: .contract)] destination, holdingCredentials in
            accounting.observers(of: destination, holdingCredentials: holdingCredentials)
        })
    let invalidation = CacheInvalidation(news: news, conversations: conversations)
    let registrar = SMPRegistrar(conversations: conversations, errorNames: .contract)
    let flows = FlowService(
        starter: starter, signals: d.flowSignals,
        completions: [
            .smpRegistration: SMPActivation(
                registrations: d.registrations, registrar: registrar, conversations: conversations, invalidation: invalidation,
                secrets: secrets, audit: audit)
        ], staging: staging,
        binding: IdentityBinding(
            registrations: d.registrations, audit: audit, invalidation: { [invalidation] in await invalidation.changed($0) },
            destinations: configuration.destinations, listedIssuers: Set(configuration.identityProviders.map(\.issuer))),
        metrics: metrics)
    // One verifier (and one cache of each provider's keys) for identity tokens and agents' access tokens.
    let identityTokens = IdentityTokenVerifier(providers: configuration.identityProviders, transport: d.transport, clock: d.clock, logger: logger)
    let registrations = RegistrationService(
        registrations: d.registrations, tokens: d.tokens, conversations: conversations, registrar: registrar, flows: flows,
        secrets: secrets, invalidation: invalidation, audit: audit, metrics: metrics, clock: d.clock, identityTokens: identityTokens,
        notBefores: notBefores, browserApps: configuration.browserApps)
    let agents = AgentAccess(
        resource: configuration.server.resourceIdentifier, publicURL: configuration.server.publicURL, verifier: identityTokens,
        registrations: d.registrations, cache: clientTokens.agentRegistrations, destinations: configuration.destinations, audit: audit,
        metrics: metrics, clock: d.clock, secrets: secrets, invalidation: invalidation, notBefores: notBefores)
    let environment = FlowKindEnvironment(
        flows: flows, registrations: d.registrations, conversations: conversations, secrets: secrets, hosted: binding, clock: d.clock,
        publicURL: configuration.server.publicURL)
    // The flow kinds: one line each, in the order `POST /v1/flows` without `kind` prefers them.
    let kinds = try FlowKinds(
        [
            SAML2Flow(environment),
            OAuth2AuthorizationCodeFlow(environment, broker: broker, logger: logger),
            OTPFlow(environment),
            BasicFormFlow(environment, invalidation: invalidation, limits: limits),
        ] + additionalFlowKinds.map { $0(environment) })
    let administration = Administration(
        repository: d.administration, registrations: d.registrations, service: registrations, conversations: conversations,
        invalidation: invalidation, audit: audit, events: d.events, notBefores: notBefores)
    return DomainRooms(
        secrets: secrets, audit: audit, usage: usage, notBefores: notBefores, clientTokens: clientTokens, broker: broker,
        configurator: configurator, binding: binding, conversations: conversations, invalidation: invalidation, flows: flows,
        identityTokens: identityTokens, registrations: registrations, agents: agents, kinds: kinds, administration: administration)
}

/// The composition root: the domain (`composeDomain`), then the edge over it, each piece once,
/// from configuration and dependencies; returns the router with every route and the services
/// the rooms need running.
///
/// `additionalFlowKinds` registers kinds beyond the built-in ones (a test's throwaway kind
/// proves that a kind is one file plus one line).
func compose(
    configuration: ParleyConfiguration, dependencies d: ParleyDependencies, metrics: Metrics, logger: Logger,
    additionalFlowKinds: [@Sendable (FlowKindEnvironment) -> any FlowKindHandler] = []
) throws -> (router: Router<ParleyRequestContext>, services: [any Service]) {
    // Every limit holds for the cluster: each instance enforces its part.
    let cluster = ClusterShare(repository: d.instances, logger: logger)
    let limits = RateLimits(settings: configuration.rateLimits, clock: d.clock, metrics: metrics, share: cluster)
    let rooms = try composeDomain(
        configuration: configuration, dependencies: d, metrics: metrics, limits: limits, logger: logger, additionalFlowKinds: additionalFlowKinds)
    let (flows, kinds, conversations, binding) = (rooms.flows, rooms.kinds, rooms.conversations, rooms.binding)
    let session = BrowserSession(apps: configuration.browserApps, publicURL: configuration.server.publicURL)
    let spool = Spool(directory: configuration.bodies.spoolDirectory, quotaBytes: configuration.bodies.spoolQuotaBytes)
    let exchange = UpstreamExchange(spool: spool, memoryBodyBytes: configuration.bodies.memoryBytes)
    metrics.addSampler(
        ScrapeGauges(
            pool: d.storeStatistics, identityTokens: rooms.identityTokens, cluster: cluster, spool: spool,
            caches: [("client_tokens", rooms.clientTokens.recent), ("agent_registrations", rooms.agents.recent)] + d.cacheStatistics
        ).sample)
    let pages = Pages(
        destinations: configuration.destinations,
        assets: PageAssets(destinations: Array(configuration.destinations.values), logos: configuration.pageLogos),
        publicURL: configuration.server.publicURL, webURL: binding.handover?.webURL)
    func inFlight(_ perKey: Int, _ subject: String, _ label: String) -> InFlightLimits {
        InFlightLimits(perKey: perKey, subject: subject, countingRefusalsIn: metrics, as: label, share: cluster)
    }
    let controllers = Controllers(
        operations: OperationsController(
            readiness: d.readiness, metrics: metrics, signingKeys: configuration.keys.signingKeys, publicURL: configuration.server.publicURL,
            protectedResourceMetadata: rooms.agents.metadata().encoded()),
        registrations: RegistrationsController(service: rooms.registrations, maxJSONBytes: configuration.limits.maxJSONBytes, session: session),
        registrationAdmission: RegistrationAdmission(limits: limits),
        flows: FlowsController(flows: flows, kinds: kinds, conversations: conversations, maxJSONBytes: configuration.limits.maxJSONBytes),
        flowPages: FlowPagesController(
            flows: flows, kinds: kinds, registrations: d.registrations, conversations: conversations,
            confirmation: FlowConfirmation(secrets: rooms.secrets, clock: d.clock, publicURL: configuration.server.publicURL), pages: pages,
            publicOrigin: URLParts(configuration.server.publicURL)?.origin,
            clientAddress: { [limits] in limits.clientAddress(peer: $0, forwardedFor: $1) }, session: session, clientTokens: rooms.clientTokens),
        proxy: ProxyController(
            conversations: conversations, flows: flows, exchange: exchange,
            stepUp: StepUpGate(registrations: d.registrations, flows: flows, kinds: kinds, clock: d.clock),
            signInWaits: SignInWaits(invalidation: rooms.invalidation)),
        proxyAdmission: ProxyAdmission(
            conversations: conversations, limits: limits,
            inFlight: inFlight(configuration.limits.maxInFlightPerRegistration, "this registration", "in_flight")),
        flowAdmission: FlowAdmission(
            limits: limits, inFlight: inFlight(configuration.limits.maxInFlightFlowsPerRegistration, "this registration", "flows_in_flight")),
        hostedUpstreamAdmission: HostedUpstreamAdmission(
            limits: limits, inFlight: inFlight(configuration.limits.maxInFlightWebPerClient, "this address", "web_in_flight"), pages: pages),
        adminAuthenticator: AdminAuthenticator(
            tokenHashes: configuration.keys.adminTokenHashes, failures: AdminFailures(limits: limits, audit: rooms.audit)),
        admin: AdminController(administration: rooms.administration, service: rooms.registrations, maxJSONBytes: configuration.limits.maxJSONBytes),
        hostedUpstream: HostedUpstreamController(
            binding: binding, flows: flows, kinds: kinds, registrations: d.registrations, conversations: conversations, exchange: exchange,
            pages: pages),
        flowRoutes: kinds.routes,
        webHandover: binding.handover.map {
            WebHandoverController(handover: $0, binding: binding, flows: flows, conversations: conversations, pages: pages)
        }, agents: rooms.agents, pageAssets: pages.assets,
        backChannelLogout: BackChannelLogoutController(verifier: rooms.identityTokens, administration: rooms.administration),
        pageAdmission: PageAdmission(limits: limits, pages: pages), limits: limits, browserSession: session)

    let routeTable = RouteTable()
    let router = Router(context: ParleyRequestContext.self)
    // Outside ParleyMiddleware, so the span sees the status its problem answers carry.
    if tracesAreOn { router.add(middleware: RequestTracingMiddleware()) }
    // Outside ParleyMiddleware too, so that the problems it renders can be read by a browser app.
    router.add(middleware: BrowserAppCORS(origins: configuration.browserApps.allOrigins))
    router.add(middleware: ParleyMiddleware(metrics: metrics, routes: routeTable))
    if let webHost = binding.handover.flatMap({ URLParts($0.webURL)?.host }) { router.add(middleware: WebOriginGuard(webHost: webHost, pages: pages)) }
    addRoutes(to: router, controllers, clientTokens: rooms.clientTokens)
    routeTable.install(router.routes.map { ($0.path.description, $0.method.rawValue) })
    let housekeeping = Housekeeping(
        usage: rooms.usage, tokens: d.tokens, retention: d.retention, auditRetention: configuration.housekeeping.auditRetention,
        clock: d.clock, logger: logger, usageInterval: configuration.housekeeping.tokenUsageInterval)
    let refreshAhead = RefreshAhead(
        tokens: d.tokens, broker: rooms.broker, configurator: rooms.configurator, destinations: configuration.destinations,
        lead: configuration.housekeeping.refreshAhead, interval: configuration.housekeeping.refreshAheadInterval,
        perDestination: configuration.housekeeping.refreshAheadPerDestination, perServer: configuration.housekeeping.refreshAheadPerServer,
        clock: d.clock, logger: logger, share: cluster,
        pace: RefreshPace(pressed: { [statistics = d.storeStatistics] in (statistics?().waiting ?? 0) > 0 }))
    var services: [any Service] = [cluster, rooms.invalidation, housekeeping, refreshAhead]
    if let events = d.events {
        services.append(
            WebhookDelivery(events: events, endpoints: configuration.webhooks, transport: d.transport, metrics: metrics, clock: d.clock, logger: logger))
    }
    return (router, services)
}

/// The Hummingbird application: the router plus the services it depends on.
/// Services start in order and stop in reverse, so the HTTP server (last) stops
/// first and lets in-flight requests finish before the store closes.
public func buildApplication(
    configuration: ParleyConfiguration, dependencies: ParleyDependencies, metrics: Metrics = Metrics(), logger: Logger,
    extraServices: [any Service] = [], onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) throws -> some ApplicationProtocol {
    let composed = try compose(configuration: configuration, dependencies: dependencies, metrics: metrics, logger: logger)
    let http1 = HTTP1Channel.Configuration(
        additionalChannelHandlers: [
            SlowPeerGuard(headTimeout: configuration.timeouts.requestHead, bodyIdleTimeout: configuration.timeouts.requestBodyIdle),
            ContinueResponder(),
        ], idleTimeout: .nanoseconds(Int64(configuration.connections.idleTimeout.components.seconds) * 1_000_000_000))
    return Application(
        router: composed.router,
        server: configuration.server.tasksOnEventLoops ? .http1OnItsLoop(configuration: http1) : .http1(configuration: http1),
        configuration: .init(
            address: .hostname(configuration.server.host, port: configuration.server.port), serverName: nil,
            availableConnectionsDelegate: configuration.connections.acceptGate(logger: logger)),
        services: dependencies.services + composed.services + extraServices,
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? 0) },
        logger: logger)
}


/// Applies pending migrations under the store's advisory lock.
public func migrate(store: PostgresStore, source: MigrationSource, logger: Logger) async throws -> [String] {
    try await Migrator(store: store, source: source, logger: logger).migrate()
}

