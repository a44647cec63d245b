import Conversation

/// A web app whose pages call Parley from the browser (`browserApps` in the destinations file):
/// its origins, the destinations it may register with, and where a finished flow may send the
/// window back. Its registrations hold their client token in a cookie no script can read.
public struct BrowserAppSpec: Sendable, Decodable, Equatable {
    public var name: String
    public var origins: [String]
    public var destinations: [String]
    public var returnUrls: [String]?

    public init(name: String, origins: [String], destinations: [String], returnUrls: [String]? = nil) {
        self.name = name
        self.origins = origins
        self.destinations = destinations
        self.returnUrls = returnUrls
    }

    /// The checked app; every problem otherwise. `destinations`: the names the file defines.
    public func validated(at label: String, destinations known: Set<String>) -> (BrowserApp?, [String]) {
        var problems: [String] = []
        let named = "\(label) '\(name.prefix(100))'"
        if name.isEmpty || name.utf8.count > 100 || !name.utf8.allSatisfy(BrowserApp.isNameByte) {
            problems.append("\(label).name must be 1 to 100 letters, digits, '-', '_' or '.'")
        }
        var checkedOrigins: [String] = []
        if origins.isEmpty { problems.append("\(named): origins must name at least one origin") }
        for (index, origin) in origins.enumerated() {
            if let checked = BrowserApp.origin(origin) {
                checkedOrigins.append(checked)
            } else {
                problems.append(
                    "\(named): origins[\(index)] must be an origin as a browser writes it (scheme://host[:port], lower case, no path; https, or http to a loopback address)"
                )
            }
        }
        if destinations.isEmpty { problems.append("\(named): destinations must name at least one destination") }
        for destination in destinations where !known.contains(destination) {
            problems.append("\(named): destinations names '\(destination.prefix(100))', which the file does not define")
        }
        for (index, url) in (returnUrls ?? []).enumerated() {
            guard let parts = URLParts(url), !url.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "#") }) else {
                problems.append("\(named): returnUrls[\(index)] must be an absolute http(s) URL without a fragment")
                continue
            }
            if !checkedOrigins.contains(parts.origin.lowercased()) {
                problems.append("\(named): returnUrls[\(index)] must be on one of the app's origins")
            }
        }
        guard problems.isEmpty else { return (nil, problems) }
        return (BrowserApp(name: name, origins: checkedOrigins, destinations: Set(destinations), returnUrls: returnUrls ?? []), [])
    }
}

/// A checked browser app.
public struct BrowserApp: Sendable, Equatable {
    public let name: String
    /// Origins as browsers send them in `Origin` (`https://app.example`, `http://127.0.0.1:5173`).
    public let origins: [String]
    public let destinations: Set<String>
    /// Where a finished flow of one of its registrations may send the window back, exactly.
    public let returnUrls: [String]

    public init(name: String, origins: [String], destinations: Set<String>, returnUrls: [String]) {
        self.name = name
        self.origins = origins
        self.destinations = destinations
        self.returnUrls = returnUrls
    }

    /// Whether `origin` (a request's `Origin` header, as sent) is one of the app's.
    public func allows(origin: String) -> Bool { origins.contains(origin) }

    /// Whether a flow of the app's registrations may end at `url`.
    public func allowsReturnURL(_ url: String) -> Bool { returnUrls.contains(url) }

    static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            true
        default: false
        }
    }

    /// `text` when it is an origin exactly as a browser serializes it: `https://host[:port]`
    /// (plain `http` only to a loopback host), lower case, the default port left out, nothing
    /// after the authority; nil otherwise.
    static func origin(_ text: String) -> String? {
        guard let parts = URLParts(text), parts.path.isEmpty, parts.query == nil, parts.origin == text, text == text.lowercased() else {
            return nil
        }
        guard parts.scheme == "https" || parts.isLoopback else { return nil }
        return text
    }
}

extension [BrowserApp] {
    /// The app that owns a browser registration.
    public func named(_ name: String?) -> BrowserApp? {
        guard let name else { return nil }
        return first { $0.name == name }
    }

    /// Every origin any app lists (CORS answers these and no other).
    public var allOrigins: Set<String> { Set(flatMap(\.origins)) }
}
