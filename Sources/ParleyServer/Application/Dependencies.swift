public import Conversation
public import Logging
public import ParleyDomain
public import ServiceLifecycle
public import Store

/// What an instance stands on: storage, signals, the upstream transport and the
/// clock. `postgres(…)` is production's; ParleyTesting builds in-memory twins.
/// A connection pool's state at one moment.
public struct PoolStatistics: Sendable {
    public var open: Int
    public var idle: Int
    public var waiting: Int
    public init(open: Int, idle: Int, waiting: Int) {
        self.open = open
        self.idle = idle
        self.waiting = waiting
    }
}

public struct ParleyDependencies: Sendable {
    public var registrations: any RegistrationRepository
    public var flows: any FlowRepository
    public var cookies: any CookieRepository
    public var tokens: any TokenRepository
    public var audit: any AuditRepository
    public var administration: any AdministrationRepository
    public var flowSignals: any FlowSignals
    public var cacheSignals: any CacheSignals
    public var readiness: any ReadinessProbe
    public var transport: any Transport
    public var clock: any WallClock
    /// Long-lived parts, in start order (they stop in reverse, after the HTTP server).
    public var services: [any Service]
    /// The database pool's counters, for `/metrics` (nil without a database).
    public var storeStatistics: (@Sendable () -> PoolStatistics)?
    /// Lifecycle events and their webhook deliveries (nil: the in-memory tier, which has no outbox).
    public var events: (any EventRepository)?
    /// The revocations' not-befores and the logout tokens taken.
    public var notBefores: any NotBeforeRepository = InMemoryNotBefores()
    /// The live instances, among which every limit is shared out.
    public var instances: any InstanceRepository = SingleInstance()
    /// Retention (expired flows and cookies, old audit events); nil: nothing to purge.
    public var retention: (any RetentionRepository)?
    /// The per-instance caches the repositories keep, for `/metrics` (name → its counters).
    public var cacheStatistics: [(name: String, source: any CacheStatisticsSource)] = []

    public init(
        registrations: any RegistrationRepository, flows: any FlowRepository, cookies: any CookieRepository, tokens: any TokenRepository,
        audit: any AuditRepository, administration: any AdministrationRepository, flowSignals: any FlowSignals,
        cacheSignals: any CacheSignals, readiness: any ReadinessProbe, transport: any Transport,
        clock: any WallClock, services: [any Service] = []
    ) {
        self.registrations = registrations
        self.flows = flows
        self.cookies = cookies
        self.tokens = tokens
        self.audit = audit
        self.administration = administration
        self.flowSignals = flowSignals
        self.cacheSignals = cacheSignals
        self.readiness = readiness
        self.transport = transport
        self.clock = clock
        self.services = services
    }

    /// PostgreSQL for every repository, `LISTEN/NOTIFY` for flow signals.
    public static func postgres(
        configuration: ParleyConfiguration, store: PostgresStore, transport: any Transport, clock: any WallClock = SystemClock(),
        logger: Logger
    ) -> ParleyDependencies {
        let listener = NotificationListener(configuration: StoreConfiguration(connectionString: configuration.database.url), logger: logger)
        let signals = PostgresFlowSignals(store: store, listener: listener)
        let cookies = PostgresCookies(store: store, keyRing: configuration.keys.keyRing)
        let tokens = PostgresTokens(store: store, keyRing: configuration.keys.keyRing)
        let administration = PostgresAdministration(store: store, keyRing: configuration.keys.keyRing)
        var dependencies = ParleyDependencies(
            registrations: PostgresRegistrations(store: store), flows: PostgresFlows(store: store), cookies: cookies, tokens: tokens,
            audit: PostgresAudit(store: store), administration: administration, flowSignals: signals,
            cacheSignals: PostgresCacheSignals(store: store, listener: listener),
            readiness: PostgresReadiness(store: store, migrations: configuration.database.migrations), transport: transport, clock: clock,
            services: [store, listener, signals])
        dependencies.events = PostgresEvents(store: store)
        dependencies.notBefores = PostgresNotBefores(store: store)
        dependencies.instances = PostgresInstances(store: store)
        dependencies.retention = administration
        dependencies.cacheStatistics = [("cookie_jars", cookies), ("oauth2_tokens", tokens)]
        dependencies.storeStatistics = {
            let s = store.statistics
            return PoolStatistics(open: s.open, idle: s.idle, waiting: s.waiting)
        }
        return dependencies
    }
}
