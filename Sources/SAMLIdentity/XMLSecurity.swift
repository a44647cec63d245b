internal import CXMLSec

/// libxml2 and xmlsec (OpenSSL back end), set up once per process: Swift runs a global's
/// initialiser exactly once, whichever thread gets there first. Every external load is
/// refused from then on (`c_parley_xmlsec_init`).
enum XMLSecurity {
    static let isReady: Bool = c_parley_xmlsec_init() == 0
}

typealias XMLNode = UnsafeMutablePointer<xmlNode>

/// A parsed document, its only owner: freed once, when this goes. Nodes reached from it
/// are borrowed and used only while it lives.
struct XMLDocument: ~Copyable {
    private let pointer: xmlDocPtr

    /// Parses without network, DTD or entities (`c_parley_xml_parse`).
    init(parsing bytes: [UInt8]) throws(SAMLIdentityError) {
        guard let length = Int32(exactly: bytes.count), length > 0 else { throw SAMLIdentityError(.notXML) }
        var parsed: xmlDocPtr?
        let code = bytes.withUnsafeBytes { raw -> Int32 in
            guard let base = raw.baseAddress else { return 1 }
            return c_parley_xml_parse(base.assumingMemoryBound(to: CChar.self), length, &parsed)
        }
        switch (code, parsed) {
        case (0, let document?): pointer = document
        case (2, _): throw SAMLIdentityError(.documentType)
        default: throw SAMLIdentityError(.notXML)
        }
    }

    deinit { xmlFreeDoc(pointer) }

    var root: XMLNode? { xmlDocGetRootElement(pointer) }

    /// The document as UTF-8 XML; nil when libxml2 cannot write it.
    func serialized() -> [UInt8]? {
        var text: UnsafeMutablePointer<xmlChar>?
        var length: Int32 = 0
        guard c_parley_xml_dump(pointer, &text, &length) == 0, let text, length > 0 else {
            c_parley_xml_free(text)
            return nil
        }
        defer { c_parley_xml_free(text) }
        return Array(UnsafeBufferPointer(start: text, count: Int(length)))
    }

    /// Makes `attribute` (holding `value`) the one element `#value` names. False when the
    /// document already has an ID of that value (libxml2 registers `xml:id` by itself).
    func registerID(_ value: String, attribute: UnsafeMutablePointer<xmlAttr>) -> Bool {
        value.withXMLChars { chars in
            guard xmlGetID(pointer, chars) == nil else { return false }
            return xmlAddID(nil, pointer, chars, attribute) != nil
        }
    }
}

/// The public key of one trusted certificate, its only owner until a context adopts it.
struct TrustedKey: ~Copyable {
    fileprivate let pointer: xmlSecKeyPtr

    init?(pem: String) {
        let bytes = Array(pem.utf8)
        guard let key = bytes.withUnsafeBufferPointer({ c_parley_key_from_certificate_pem($0.baseAddress, $0.count) }) else { return nil }
        pointer = key
    }

    /// Hands the key to its new owner, which frees it.
    fileprivate consuming func release() -> xmlSecKeyPtr {
        let key = pointer
        discard self
        return key
    }

    deinit { xmlSecKeyDestroy(pointer) }
}

/// One verification: a dsig context with one trusted key (adopted) and only the allowed
/// algorithms and same-document references enabled. Destroyed once, with its key.
struct SignatureContext: ~Copyable {
    private let pointer: xmlSecDSigCtxPtr

    enum Outcome { case verified, notVerified, otherThanAsked }

    init?(adopting key: consuming TrustedKey) {
        // c_parley_dsig_context owns the key from here on, and frees it when it fails.
        guard let context = c_parley_dsig_context(key.release()) else { return nil }
        pointer = context
    }

    deinit { xmlSecDSigCtxDestroy(pointer) }

    func verify(_ signature: XMLNode, expectedURI: String) -> Outcome {
        switch c_parley_dsig_verify(pointer, signature, expectedURI) {
        case 0: .verified
        case 2: .otherThanAsked
        default: .notVerified
        }
    }
}

// MARK: reading the tree

extension UnsafeMutablePointer where Pointee == xmlNode {
    var isElement: Bool { pointee.type == XML_ELEMENT_NODE }

    var localName: String { pointee.name.map { String(cString: $0) } ?? "" }

    var namespaceURI: String? { pointee.ns?.pointee.href.map { String(cString: $0) } }

    func isElement(_ name: String, in namespace: String) -> Bool {
        isElement && localName == name && namespaceURI == namespace
    }

    var parentElement: XMLNode? {
        guard let parent = pointee.parent, parent.pointee.type == XML_ELEMENT_NODE else { return nil }
        return parent
    }

    var childElements: [XMLNode] {
        var elements: [XMLNode] = []
        var child = pointee.children
        while let node = child {
            if node.isElement { elements.append(node) }
            child = node.pointee.next
        }
        return elements
    }

    /// Every element from this one down, this one included (iterative: no recursion on
    /// hostile depth, which libxml2 bounds at 256 anyway).
    func forEachElement(_ body: (XMLNode) -> Void) {
        var stack: [XMLNode] = [self]
        while let node = stack.popLast() {
            body(node)
            var child = node.pointee.children
            while let next = child {
                if next.isElement { stack.append(next) }
                child = next.pointee.next
            }
        }
    }

    /// Each attribute: (local name, namespace URI, the attribute).
    func forEachAttribute(_ body: (String, String?, UnsafeMutablePointer<xmlAttr>) -> Void) {
        var attribute = pointee.properties
        while let current = attribute {
            let name = current.pointee.name.map { String(cString: $0) } ?? ""
            body(name, current.pointee.ns?.pointee.href.map { String(cString: $0) }, current)
            attribute = current.pointee.next
        }
    }

    /// The attribute without a namespace called `name`.
    func attributeNode(_ name: String) -> UnsafeMutablePointer<xmlAttr>? {
        var found: UnsafeMutablePointer<xmlAttr>?
        forEachAttribute { local, namespace, attribute in
            if found == nil, namespace == nil, local == name { found = attribute }
        }
        return found
    }

    func attribute(_ name: String) -> String? { attributeNode(name).map(\.value) }

    /// The text of an element that holds only text (CDATA is merged into text by the
    /// parse); nil when it holds anything else: a comment, an element, a processing
    /// instruction or an entity reference.
    var textOnly: String? {
        var bytes: [UInt8] = []
        var child = pointee.children
        while let node = child {
            guard node.pointee.type == XML_TEXT_NODE || node.pointee.type == XML_CDATA_SECTION_NODE else { return nil }
            if let content = node.pointee.content {
                var cursor = content
                while cursor.pointee != 0 {
                    bytes.append(cursor.pointee)
                    cursor += 1
                }
            }
            child = node.pointee.next
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension UnsafeMutablePointer where Pointee == xmlAttr {
    /// The value as libxml2 resolved it (character references expanded).
    var value: String {
        guard let chars = c_parley_xml_attribute_value(self) else { return "" }
        defer { c_parley_xml_free(chars) }
        return String(cString: chars)
    }
}

extension String {
    /// `body` with this string as a NUL-terminated `xmlChar *`.
    func withXMLChars<T>(_ body: (UnsafePointer<xmlChar>) -> T) -> T {
        withCString { $0.withMemoryRebound(to: xmlChar.self, capacity: utf8.count + 1, body) }
    }
}
