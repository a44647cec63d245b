package import AuthFlows
package import Conversation
import Foundation
package import Logging
import ServiceLifecycle

/// Refresh ahead of need: a registration's token with a refresh token (authorization code, or
/// password grant) that expires within `lead`, and is past half its life, is refreshed in the
/// background, so no call waits for it; and a refresh token the server no longer honours is
/// noticed before the person needs the back end (an authorization-code registration becomes
/// `reconnect_required`, see `Reconnects`; a password-grant token is obtained again by the next call). Every instance
/// looks every `interval` (plus up to a fifth of it at random, so they do not look in step);
/// the token lease single-flights each refresh across instances, and another instance's fresh
/// token is taken as it is. At most `perDestination` refreshes per destination and `perServer`
/// per authorization server (destinations that share a token endpoint share it) per look, each
/// also under the token-endpoint budget every refresh obeys, as many at a time as `RefreshPace`
/// allows (eight at first; more while the server answers as fast, fewer when it slows down or
/// throttles, or while requests wait for a database connection). Failures are the broker's as on
/// the request path (audited, backed off); nothing here retries on its own.
package struct RefreshAhead: Service {
    /// The grants whose registration tokens carry a refresh token worth renewing ahead.
    package static let grants: [OAuth2Settings.Grant] = [.authorizationCode, .password]

    package let tokens: any TokenRepository
    package let broker: OAuth2Broker
    package let configurator: DestinationConfigurator
    package let destinations: [String: Destination]
    package let lead: Duration
    package let interval: Duration
    package let perDestination: Int
    package var perServer: Int = 100
    package let clock: any WallClock
    package let logger: Logger
    /// The cluster the budgets hold for: each instance takes its part of each per look.
    package var share: ClusterShare? = nil
    /// How many refreshes run at once (kept from look to look).
    package let pace: RefreshPace
    /// The destinations whose registrations' tokens are refreshed ahead (a grant of `grants`).
    let refreshable: [String]

    package func run() async throws {
        // A service that ends stops the whole server (the group's rule): with nothing to do, wait.
        guard lead > .zero, !refreshable.isEmpty else {
            try? await gracefulShutdown()
            return
        }
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval + interval * Double.random(in: 0...0.2))
                await look()
            }
        }
    }

    /// One look: the tokens due, soonest first; how many refreshes it started.
    @discardableResult
    package func look() async -> Int {
        let perDestination = share?.part(of: self.perDestination) ?? self.perDestination
        let perServer = share?.part(of: self.perServer) ?? self.perServer
        let before = clock.now.addingTimeInterval(lead.timeInterval)
        let due: [(TokenKey, StoredToken)]
        do {
            due = try await tokens.expiring(
                destinations: refreshable, kinds: Self.grants.map(\.rawValue), before: before, limit: perDestination * max(1, refreshable.count))
        } catch {
            logger.warning("tokens due for a refresh could not be read", metadata: ["error": "\(error)"])
            return 0
        }
        var started: [String: Int] = [:]
        var startedAtServer: [String: Int] = [:]
        var chosen: [(TokenKey, StoredToken, TokenEndpointClient)] = []
        for (key, token) in due {
            guard let destination = destinations[key.destination], let grant = destination.oauth2?.grant, Self.grants.contains(grant),
                started[key.destination, default: 0] < perDestination, let endpoint = configurator.tokenEndpoint(for: destination)
            else { continue }
            let server = URLParts(endpoint.settings.tokenEndpoint).map { $0.origin + $0.path } ?? endpoint.settings.tokenEndpoint
            guard startedAtServer[server, default: 0] < perServer else { continue }
            started[key.destination, default: 0] += 1
            startedAtServer[server, default: 0] += 1
            chosen.append((key, token, endpoint))
        }
        // As many at a time as the pace allows: each refresh waits mostly on the network and the database.
        // The pace hears of the token-endpoint calls only (not of a token another instance had just
        // stored, nor of a refresh Parley's own back-off held back: neither says anything of load).
        let report: @Sendable (TokenCallReport) -> Void = { [pace] call in
            pace.finished(call.overloaded ? .throttled : .answered(latency: call.latency))
        }
        await withTaskGroup(of: Void.self) { group in
            var pending = chosen.makeIterator()
            var running = 0
            while true {
                while running < pace.limit, let (key, token, endpoint) = pending.next() {
                    running += 1
                    group.addTask {
                        do {
                            _ = try await broker.obtain(key, endpoint: endpoint, credentials: nil, stale: token, ahead: true, report: report)
                        } catch {
                            logger.debug(
                                "a refresh ahead of need failed", metadata: ["destination": .string(key.destination), "error": "\(error)"])
                        }
                    }
                }
                guard running > 0, await group.next() != nil else { break }
                running -= 1
            }
        }
        let count = started.values.reduce(0, +)
        if count > 0 { logger.info("tokens refreshed ahead of need", metadata: ["tokens": "\(count)", "pace": "\(pace.limit)"]) }
        return count
    }

    package init(tokens: any TokenRepository, broker: OAuth2Broker, configurator: DestinationConfigurator, destinations: [String: Destination], lead: Duration, interval: Duration, perDestination: Int, perServer: Int = 100, clock: any WallClock, logger: Logger, share: ClusterShare? = nil, pace: RefreshPace = RefreshPace()) {
        self.tokens = tokens
        self.broker = broker
        self.configurator = configurator
        self.destinations = destinations
        self.lead = lead
        self.interval = interval
        self.perDestination = perDestination
        self.perServer = perServer
        self.clock = clock
        self.logger = logger
        self.share = share
        self.pace = pace
        refreshable = destinations.values.filter { $0.oauth2.map { Self.grants.contains($0.grant) } ?? false }.map(\.name).sorted()
    }
}
