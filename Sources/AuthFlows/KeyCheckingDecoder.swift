/// A decoder that wraps another and notes, for every object it opens, which keys the
/// `Decodable` type asked for and which the document holds, so that a key nobody asked for (a
/// misspelling: `polcy`, `oauth`) is a problem instead of a silent default. The keys a type knows
/// are exactly those its `init(from:)` touches (synthesised: its `CodingKeys`), so the list cannot
/// drift from the type; a dictionary (`additionalParams`) asks for every key it holds.
final class KeyRecorder {
    struct Object {
        var path: [any CodingKey]
        var keyType: ObjectIdentifier
        var present: [String]
        /// The object's `name`, when it has one, to name `destinations[2] (sim)`.
        var label: String?
        /// A decoding error left through this object: the keys after it were never asked for.
        var aborted = false
    }

    private(set) var objects: [Object] = []
    /// Each labelled object's path (`.destinations[2]`) to its `name`.
    private var labels: [String: String] = [:]
    /// Per key type, the keys asked for in any object of that type, in the order asked (and as a
    /// set, so that a map of many keys costs a lookup per key).
    private var known: [ObjectIdentifier: [String]] = [:]
    private var knownSet: [ObjectIdentifier: Set<String>] = [:]
    /// The most unknown keys reported one by one; the rest are counted.
    static let maxReported = 100
    /// Keys of the operator's own, never read (YAML anchors to reuse, notes): `x-base: &b {…}`.
    static let extensionPrefix = "x-"

    func open(path: [any CodingKey], keyType: ObjectIdentifier, present: [String], label: String?) -> Int {
        objects.append(Object(path: path, keyType: keyType, present: present, label: label))
        if let label { labels[render(path, labels: false)] = label }
        return objects.count - 1
    }

    func asked(_ key: String, keyType: ObjectIdentifier) {
        if knownSet[keyType, default: []].insert(key).inserted { known[keyType, default: []].append(key) }
    }

    func abort(_ object: Int) { objects[object].aborted = true }

    /// One problem per key that no type asked for, in objects that decoded to the end; with the
    /// place written the way the documentation writes it and the nearest known key.
    func unknownKeys() -> [String] {
        var problems: [String] = []
        var unreported = 0
        for object in objects where !object.aborted {
            let known = known[object.keyType] ?? []
            let knownSet = knownSet[object.keyType] ?? []
            for key in object.present where !knownSet.contains(key) && !key.hasPrefix(Self.extensionPrefix) {
                guard problems.count < Self.maxReported else {
                    unreported += 1
                    continue
                }
                let place = render(object.path + [PlainKey(stringValue: key)])
                var line = "unknown key '\(key.prefix(80))' at \(place)"
                if let nearest = Self.nearest(to: key, among: known) { line += " (did you mean '\(nearest)'?)" }
                problems.append(line)
            }
        }
        if unreported > 0 { problems.append("\(unreported) more unknown keys") }
        return problems
    }

    /// For a missing key: a key in that object close enough to be its misspelling.
    func misspelling(of key: String, at path: [any CodingKey]) -> String? {
        let rendered = render(path, labels: false)
        guard let object = objects.last(where: { render($0.path, labels: false) == rendered }) else { return nil }
        let candidates = object.present.filter { knownSet[object.keyType]?.contains($0) != true }.prefix(Self.maxReported)
        guard let nearest = Self.nearest(to: key, among: Array(candidates)), Self.distance(nearest, key) <= max(2, key.count / 3) else { return nil }
        return nearest
    }

    /// `destinations[2] (sim).registration.polcy`.
    func render(_ path: [any CodingKey]) -> String {
        var text = ""
        for (depth, key) in path.enumerated() {
            if let index = key.intValue {
                text += "[\(index)]"
                if let label = labels[render(Array(path[...depth]), labels: false)] {
                    text += " (\(label.prefix(80)))"
                }
            } else {
                text += (text.isEmpty ? "" : ".") + key.stringValue.prefix(80)
            }
        }
        return text.isEmpty ? "top level" : text
    }

    private func render(_ path: [any CodingKey], labels: Bool) -> String {
        path.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
    }

    /// The known key with the smallest edit distance (case-insensitive), the first on a tie.
    static func nearest(to key: String, among known: [String]) -> String? {
        var best: (key: String, distance: Int)?
        for candidate in known {
            let d = distance(candidate, key)
            if d < best?.distance ?? Int.max { best = (candidate, d) }
        }
        return best?.key
    }

    /// Levenshtein distance over lowercased characters; a key longer than 64 characters is
    /// compared by its first 64, so that a hostile file costs little.
    static func distance(_ a: String, _ b: String) -> Int {
        let x = Array(a.prefix(64).lowercased()), y = Array(b.prefix(64).lowercased())
        if x.isEmpty { return y.count }
        if y.isEmpty { return x.count }
        var previous = Array(0...y.count)
        var current = [Int](repeating: 0, count: y.count + 1)
        for i in 1...x.count {
            current[0] = i
            for j in 1...y.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[y.count]
    }
}

struct PlainKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// The wrapping decoder: containers it hands out are wrapped too, and every value below is
/// decoded through it.
struct KeyCheckingDecoder: Decoder {
    let base: any Decoder
    let recorder: KeyRecorder

    var codingPath: [any CodingKey] { base.codingPath }
    var userInfo: [CodingUserInfoKey: Any] { base.userInfo }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        let all = try base.container(keyedBy: PlainKey.self)
        let label = try? all.decodeIfPresent(String.self, forKey: PlainKey(stringValue: "name"))
        let object = recorder.open(
            path: base.codingPath, keyType: ObjectIdentifier(Key.self), present: all.allKeys.map(\.stringValue), label: label)
        return KeyedDecodingContainer(
            KeyCheckingKeyedContainer(base: try base.container(keyedBy: type), recorder: recorder, object: object))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        KeyCheckingUnkeyedContainer(base: try base.unkeyedContainer(), recorder: recorder)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { try base.singleValueContainer() }
}

struct KeyCheckingKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let base: KeyedDecodingContainer<Key>
    let recorder: KeyRecorder
    let object: Int

    var codingPath: [any CodingKey] { base.codingPath }
    var allKeys: [Key] { base.allKeys }

    private func asking<T>(_ key: Key, _ body: () throws -> T) throws -> T {
        recorder.asked(key.stringValue, keyType: ObjectIdentifier(Key.self))
        do { return try body() } catch {
            recorder.abort(object)
            throw error
        }
    }

    func contains(_ key: Key) -> Bool {
        recorder.asked(key.stringValue, keyType: ObjectIdentifier(Key.self))
        return base.contains(key)
    }
    func decodeNil(forKey key: Key) throws -> Bool { try asking(key) { try base.decodeNil(forKey: key) } }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try asking(key) { try T(from: KeyCheckingDecoder(base: try base.superDecoder(forKey: key), recorder: recorder)) }
    }
    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try asking(key) { try KeyCheckingDecoder(base: try base.superDecoder(forKey: key), recorder: recorder).container(keyedBy: type) }
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try asking(key) { try KeyCheckingDecoder(base: try base.superDecoder(forKey: key), recorder: recorder).unkeyedContainer() }
    }
    func superDecoder() throws -> any Decoder { KeyCheckingDecoder(base: try base.superDecoder(), recorder: recorder) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        try asking(key) { KeyCheckingDecoder(base: try base.superDecoder(forKey: key), recorder: recorder) }
    }
}

struct KeyCheckingUnkeyedContainer: UnkeyedDecodingContainer {
    var base: any UnkeyedDecodingContainer
    let recorder: KeyRecorder

    var codingPath: [any CodingKey] { base.codingPath }
    var count: Int? { base.count }
    var isAtEnd: Bool { base.isAtEnd }
    var currentIndex: Int { base.currentIndex }

    mutating func decodeNil() throws -> Bool { try base.decodeNil() }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try T(from: KeyCheckingDecoder(base: try base.superDecoder(), recorder: recorder))
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try KeyCheckingDecoder(base: try base.superDecoder(), recorder: recorder).container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try KeyCheckingDecoder(base: try base.superDecoder(), recorder: recorder).unkeyedContainer()
    }
    mutating func superDecoder() throws -> any Decoder { KeyCheckingDecoder(base: try base.superDecoder(), recorder: recorder) }
}
