import Foundation

/// Turns an `Encodable` answer into a `JSONValue`, so every JSON body Parley writes
/// leaves through `JSONValue.encoded()`: sorted keys, `<`, `>` and `&` escaped, byte for
/// byte what the hand-built answers wrote before the answers became types.
///
/// The contract's forms are built in: a `Date` is written as RFC 3339 (`RFC3339.format`,
/// whole seconds, UTC) and a `UUID` in lower case; every number is a JSON number. A `nil`
/// optional is left out, as with `JSONEncoder`; a member the contract writes as `null`
/// is declared `@Nullable`.
package struct JSONValueEncoder {
    package func encode(_ value: some Encodable) throws -> JSONValue {
        let root = Node()
        try root.store(value, codingPath: [])
        return root.json
    }

    package init() {
    }
}

/// An optional member that the contract writes as `null` when it is absent (a
/// synthesized `Encodable` leaves a `nil` optional out; the contract's objects carry
/// every member).
@propertyWrapper
package struct Nullable<Value: Encodable>: Encodable {
    package var wrappedValue: Value?

    package init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension Nullable: Sendable where Value: Sendable {}
extension Nullable: Equatable where Value: Equatable {}

extension JSONValue: Encodable {
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .bool(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .number(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .string(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .array(let items):
            var container = encoder.unkeyedContainer()
            for item in items { try container.encode(item) }
        case .object(let members):
            var container = encoder.container(keyedBy: MemberKey.self)
            for (key, value) in members { try container.encode(value, forKey: MemberKey(key)) }
        }
    }

    private struct MemberKey: CodingKey {
        package let stringValue: String
        package var intValue: Int? { nil }
        package init(_ name: String) { stringValue = name }
        package init?(stringValue: String) { self.stringValue = stringValue }
        package init?(intValue: Int) { nil }
    }
}

/// One value under construction: a leaf, an object or an array. A reference, so that
/// containers handed out by an `Encoder` write into the tree that the encoder reads.
private final class Node {
    package var leaf: JSONValue?
    package var members: [String: Node]?
    package var items: [Node]?

    package var json: JSONValue {
        if let leaf { return leaf }
        if let items { return .array(items.map(\.json)) }
        if let members { return .object(members.mapValues(\.json)) }
        return .object([:])  // a value that encoded nothing, as JSONEncoder writes it
    }

    package func store<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        if let leaf = Self.leaf(value) {
            self.leaf = leaf
            members = nil
            items = nil
        } else {
            try value.encode(to: NodeEncoder(node: self, codingPath: codingPath))
        }
    }

    package func child(_ key: String) -> Node {
        let node = Node()
        if members == nil {
            leaf = nil
            members = [:]
        }
        members?[key] = node
        return node
    }

    package func appended() -> Node {
        let node = Node()
        if items == nil {
            leaf = nil
            items = []
        }
        items?.append(node)
        return node
    }

    /// Scalars, and the contract's forms of dates and ids. The standard containers pass
    /// their primitive `encode` calls to the generic one, so every scalar arrives here.
    private static func leaf(_ value: some Encodable) -> JSONValue? {
        switch value {
        case let value as JSONValue: value
        case let value as String: .string(value)
        case let value as Bool: .bool(value)
        case let value as Double: .number(value)
        case let value as Float: .number(Double(value))
        case let value as any BinaryInteger: .number(Double(value))
        case let value as Date: .string(RFC3339.format(value))
        case let value as UUID: .string(value.uuidString.lowercased())
        default: nil
        }
    }
}

private struct NodeEncoder: Encoder {
    package let node: Node
    package let codingPath: [any CodingKey]
    package var userInfo: [CodingUserInfoKey: Any] { [:] }

    package func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.members == nil {
            node.leaf = nil
            node.items = nil
            node.members = [:]
        }
        return KeyedEncodingContainer(KeyedNodeContainer<Key>(node: node, codingPath: codingPath))
    }

    package func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.items == nil {
            node.leaf = nil
            node.members = nil
            node.items = []
        }
        return UnkeyedNodeContainer(node: node, codingPath: codingPath)
    }

    package func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleNodeContainer(node: node, codingPath: codingPath)
    }
}

private struct KeyedNodeContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    package let node: Node
    package let codingPath: [any CodingKey]

    package mutating func encodeNil(forKey key: Key) throws {
        node.child(key.stringValue).leaf = .null
    }

    package mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try node.child(key.stringValue).store(value, codingPath: codingPath + [key])
    }

    package mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    package mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
    }

    package mutating func superEncoder() -> any Encoder {
        NodeEncoder(node: node.child("super"), codingPath: codingPath)
    }

    package mutating func superEncoder(forKey key: Key) -> any Encoder {
        NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key])
    }
}

private struct UnkeyedNodeContainer: UnkeyedEncodingContainer {
    package let node: Node
    package let codingPath: [any CodingKey]
    package var count: Int { node.items?.count ?? 0 }

    package mutating func encodeNil() throws {
        node.appended().leaf = .null
    }

    package mutating func encode<T: Encodable>(_ value: T) throws {
        try node.appended().store(value, codingPath: codingPath)
    }

    package mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: node.appended(), codingPath: codingPath).container(keyedBy: keyType)
    }

    package mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        NodeEncoder(node: node.appended(), codingPath: codingPath).unkeyedContainer()
    }

    package mutating func superEncoder() -> any Encoder {
        NodeEncoder(node: node.appended(), codingPath: codingPath)
    }
}

private struct SingleNodeContainer: SingleValueEncodingContainer {
    package let node: Node
    package let codingPath: [any CodingKey]

    package mutating func encodeNil() throws {
        node.leaf = .null
        node.members = nil
        node.items = nil
    }

    package mutating func encode<T: Encodable>(_ value: T) throws {
        try node.store(value, codingPath: codingPath)
    }
}

/// A small JSON value, for bodies whose shape is fixed by the contract.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public static func optional(_ s: String?) -> JSONValue { s.map { .string($0) } ?? .null }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .number(let n):
            if n.rounded() == n, abs(n) < 1e15 { out += Array(String(Int64(n)).utf8) } else { out += Array(String(n).utf8) }
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                members[key]!.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for u in s.utf8 {
            switch u {
            case UInt8(ascii: "\""): out += [92, 34]
            case UInt8(ascii: "\\"): out += [92, 92]
            case 0x0A: out += [92, UInt8(ascii: "n")]
            case 0x0D: out += [92, UInt8(ascii: "r")]
            case 0x09: out += [92, UInt8(ascii: "t")]
            case 0..<0x20, UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "&"):
                out += Array(String(format: "\\u%04x", u).utf8)
            default: out.append(u)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
