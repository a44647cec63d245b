package import AuthFlows
import Foundation

/// Token events become audit events (no token values) and refresh outcomes a metric; a
/// rejected refresh of a token only a person can renew makes its registration `reconnect_required`.
package struct AuditTokenEvents: TokenEventSink {
    package let audit: AuditLog
    package let metrics: Metrics
    package var reconnects: Reconnects? = nil
    package var events: (any EventRepository)? = nil

    package func record(_ event: TokenEvent, key: TokenKey, grant: OAuth2Settings.Grant, detail: String?) async {
        var fields = ["grant": grant.rawValue, "scopeKey": key.scopeKey]
        if let detail { fields["outcome"] = detail }
        let registration = key.registrationID.flatMap(UUID.init(uuidString:))
        await audit.record(AuditAction(event), actor: .system, registrationID: registration, destination: key.destination, detail: fields)
        if event == .refreshRejected, grant == .authorizationCode, let registration {
            await reconnects?.refreshRejected(registration: registration, scopeKey: key.scopeKey)
        }
    }

    package func refreshed(_ outcome: RefreshOutcome, destination: String, ahead: Bool) {
        metrics.increment(.tokenRefreshes, [("destination", destination), ("outcome", outcome.rawValue), ("when", ahead ? "ahead" : "request")])
    }

    /// `token.refresh_failed`: the refresh keeps failing for a reason that may pass (the tokens are kept).
    package func refreshKeepsFailing(_ key: TokenKey, grant: OAuth2Settings.Grant, failures: Int, detail: String) async {
        guard let events else { return }
        let registration = key.registrationID.flatMap(UUID.init(uuidString:))
        let event = LifecycleEvent(
            .refreshFailed, detail: ["scopeKey": key.scopeKey, "grant": grant.rawValue, "failures": String(failures), "outcome": detail])
        do {
            try await events.append(event, registrationID: registration, destination: key.destination)
        } catch {
            audit.logger.warning("a token.refresh_failed event was not recorded", metadata: ["error": "\(error)"])
        }
    }

    package init(audit: AuditLog, metrics: Metrics, reconnects: Reconnects? = nil, events: (any EventRepository)? = nil) {
        self.audit = audit
        self.metrics = metrics
        self.reconnects = reconnects
        self.events = events
    }
}
