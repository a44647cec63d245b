
// Values that hold a secret print without it: a debug log that interpolates a value holding
// one of them (ServiceLifecycle logs every service it starts at debug level), `dump`, or a
// test's failure message shows its shape, never the secret.

/// Prints as its type and the members that are no secret; `Mirror` (`dump`) sees the same.
protocol Redacted: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// What may be shown: no secret.
    var shown: KeyValuePairs<String, String> { get }
}

extension Redacted {
    public var description: String {
        "\(Self.self)(" + shown.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + (shown.isEmpty ? "" : ", ") + "…)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: shown.map { (label: $0.key, value: $0.value as Any) }, displayStyle: .struct) }
}

extension OAuth2Settings: Redacted {
    var shown: KeyValuePairs<String, String> { ["destination": destination, "grant": grant.rawValue, "tokenEndpoint": tokenEndpoint] }
}

extension UserCredentials: Redacted {
    var shown: KeyValuePairs<String, String> { [:] }
}

extension PropagatedIdentity: Redacted {
    var shown: KeyValuePairs<String, String> { [:] }
}

extension ClientCertificateMaterial: Redacted {
    var shown: KeyValuePairs<String, String> { [:] }
}

extension StoredCookie: Redacted {
    var shown: KeyValuePairs<String, String> { ["name": name, "domain": domain, "path": path] }
}

extension StoredToken: Redacted {
    var shown: KeyValuePairs<String, String> { ["tokenType": tokenType] }
}
