import HummingbirdCore
import Logging
import ParleyDomain

extension ParleyConfiguration.Connections {
    /// Hummingbird's accept gate: past `maxConnections` open client connections the server
    /// stops accepting, and the next connection waits in the listen backlog until one closes.
    func acceptGate(logger: Logger) -> any AvailableConnectionsDelegate {
        MaximumAvailableConnections(maxConnections, logger: logger)
    }
}
