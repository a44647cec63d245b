import AuthFlows
import Conversation
import Foundation
import Logging
import ServiceLifecycle

/// Refresh ahead of need: a registration's authorization-code token (the kind only a person can
/// replace) that expires within `lead`, and is past half its life, is refreshed in the background, so no call waits for it
/// and a refresh token the server no longer honours is noticed before the person needs the
/// back end (the registration becomes `reconnect_required`, see `Reconnects`). Every instance
/// looks every `interval` (plus up to a fifth of it at random, so they do not look in step);
/// the token lease single-flights each refresh across instances, and another instance's fresh
/// token is taken as it is. At most `perDestination` refreshes per destination per look, each
/// also under the token-endpoint budget every refresh obeys. Failures are the broker's as on
/// the request path (audited, backed off); nothing here retries on its own.
struct RefreshAhead: Service {
    let tokens: any TokenRepository
    let broker: OAuth2Broker
    let configurator: DestinationConfigurator
    let destinations: [String: Destination]
    let lead: Duration
    let interval: Duration
    let perDestination: Int
    let clock: any WallClock
    let logger: Logger

    func run() async throws {
        // A service that ends stops the whole server (the group's rule): with nothing to do, wait.
        guard lead > .zero, destinations.values.contains(where: { $0.oauth2?.grant == .authorizationCode }) else {
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
    func look() async -> Int {
        let before = clock.now.addingTimeInterval(lead.timeInterval)
        let due: [(TokenKey, StoredToken)]
        do {
            due = try await tokens.expiring(
                kind: OAuth2Settings.Grant.authorizationCode.rawValue, before: before, limit: perDestination * max(1, destinations.count))
        } catch {
            logger.warning("tokens due for a refresh could not be read", metadata: ["error": "\(error)"])
            return 0
        }
        var started: [String: Int] = [:]
        for (key, token) in due {
            guard let destination = destinations[key.destination], destination.oauth2?.grant == .authorizationCode,
                started[key.destination, default: 0] < perDestination, let endpoint = configurator.tokenEndpoint(for: destination)
            else { continue }
            started[key.destination, default: 0] += 1
            do {
                _ = try await broker.obtain(key, endpoint: endpoint, credentials: nil, stale: token)
            } catch {
                logger.debug("a refresh ahead of need failed", metadata: ["destination": .string(key.destination), "error": "\(error)"])
            }
        }
        let count = started.values.reduce(0, +)
        if count > 0 { logger.info("tokens refreshed ahead of need", metadata: ["tokens": "\(count)"]) }
        return count
    }
}
