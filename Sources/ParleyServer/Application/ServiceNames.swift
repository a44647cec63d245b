public import ParleyDomain
// ServiceLifecycle logs every service it starts and stops at debug level, as `"\(service)"`:
// each of Parley's services prints as its name, not as the configuration it holds.

extension CacheInvalidation: CustomStringConvertible {
    package var description: String { "CacheInvalidation" }
}

extension Housekeeping: CustomStringConvertible {
    package var description: String { "Housekeeping" }
}

extension RefreshAhead: CustomStringConvertible {
    package var description: String { "RefreshAhead" }
}

extension WebhookDelivery: CustomStringConvertible {
    package var description: String { "WebhookDelivery(endpoints: \(endpoints.count))" }
}

extension WebhookEndpoint: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "WebhookEndpoint(url: \(WebhookEndpoint.display(url)), secrets: \(secrets.count))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description], displayStyle: .struct) }
}
