import Conversation

/// The lifecycle events Parley reports (the outbox of migration 0013). The raw values are
/// the `type` of an event as stored, listed and sent; never change one.
public enum LifecycleEventType: String, Sendable, CaseIterable, Codable {
    /// A registration's credentials can no longer be renewed without a person.
    case reconnectRequired = "registration.reconnect_required"
    /// A `reconnect_required` registration is `active` again (a flow completed for it).
    case recovered = "registration.recovered"
    /// A registration's credentials are gone: deleted by its client or an administrator, or
    /// revoked by an administrator.
    case revoked = "registration.revoked"
    case flowCompleted = "flow.completed"
    /// A flow failed; `detail.reason` says why (`identity_mismatch`, …).
    case flowFailed = "flow.failed"
    /// A transient refresh failure repeated (`PARLEY_REFRESH_FAILED_EVENT_AFTER` tries in a row).
    case refreshFailed = "token.refresh_failed"
}

/// One `webhooks` entry as written (at the top of the destinations file, or in a destination):
/// where to send events, the secret that signs them, and which events (default: all).
public struct WebhookSpec: Sendable, Decodable, Equatable {
    public var url: String
    /// Where the signing secret is: `env:NAME` (an environment variable) or `file:/path`. The value
    /// is one secret or several separated by spaces (every one signs, for rotation); each is
    /// `whsec_<base64>` as Standard Webhooks writes them (the prefix may be left out), at least 24 bytes.
    public var secretRef: String
    public var events: [String]?

    public init(url: String, secretRef: String, events: [String]? = nil) {
        self.url = url
        self.secretRef = secretRef
        self.events = events
    }

    /// The checked subscription; `scope` is the destination it belongs to (nil: every destination).
    public func validated(at label: String, scope: String?) -> (WebhookSubscription?, [String]) {
        var problems: [String] = []
        if let parts = URLParts(url) {
            if parts.scheme != "https" && !parts.isLoopback {
                problems.append("\(label).url must be https (plain http only to a loopback address)")
            }
            if url.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) {
                problems.append("\(label).url must not have a fragment, spaces or control characters")
            }
        } else {
            problems.append("\(label).url must be an absolute http(s) URL without user info")
        }
        if !(secretRef.hasPrefix("env:") && secretRef.count > 4) && !(secretRef.hasPrefix("file:/")) {
            problems.append("\(label).secretRef must be env:NAME or file:/absolute/path")
        }
        var types: Set<LifecycleEventType>?
        if let events {
            var chosen: Set<LifecycleEventType> = []
            for name in events {
                if let type = LifecycleEventType(rawValue: name) {
                    chosen.insert(type)
                } else {
                    let known = LifecycleEventType.allCases.map(\.rawValue).joined(separator: ", ")
                    problems.append("\(label).events: unknown event '\(name.prefix(80))' (known: \(known))")
                }
            }
            if events.isEmpty { problems.append("\(label).events must name at least one event (leave it out for all)") }
            types = chosen
        }
        guard problems.isEmpty else { return (nil, problems) }
        return (WebhookSubscription(url: url, secretRef: secretRef, events: types, destination: scope), [])
    }
}

/// A checked `webhooks` entry: its events (nil: all) of its destination (nil: of every destination)
/// go to `url`, signed with the secrets `secretRef` names (read by the server at start).
public struct WebhookSubscription: Sendable, Equatable {
    public let url: String
    public let secretRef: String
    public let events: Set<LifecycleEventType>?
    public let destination: String?

    public init(url: String, secretRef: String, events: Set<LifecycleEventType>?, destination: String?) {
        self.url = url
        self.secretRef = secretRef
        self.events = events
        self.destination = destination
    }

    /// Whether an event of `type` about `destination` goes to this subscription.
    public func covers(_ type: LifecycleEventType, destination eventDestination: String?) -> Bool {
        (events?.contains(type) ?? true) && (destination == nil || destination == eventDestination)
    }
}
