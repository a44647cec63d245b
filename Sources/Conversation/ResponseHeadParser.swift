/// Reads an upstream's response head one line at a time, as libcurl hands it over, and
/// decides whether it is an answer Parley may pass on. Every byte is the upstream's and
/// may be hostile: the parser never traps, bounds what it keeps, and turns nonsense into
/// `.failed` (which the transport reports as `502 upstream_unavailable`).
///
/// Refused: a first line that is not `HTTP/<version> <3 digits>` with a status in
/// 100–599; a field line without a colon or with a name that is not an RFC 9110 token
/// (`Foo : bar`, `: x`); NUL or a bare CR in a value; `Content-Length` beside
/// `Transfer-Encoding`, or `Content-Length` values that are not one decimal number; a
/// block over `maxHeadBytes` or with more than `maxFields` fields; more than
/// `maxInterimBlocks` 1xx blocks. Obsolete line folding is replaced by a space
/// (RFC 9112 §5.2).
public struct ResponseHeadParser: Sendable {
    public struct Limits: Sendable {
        public var maxHeadBytes: Int
        public var maxFields: Int
        public var maxInterimBlocks: Int

        public init(maxHeadBytes: Int = 64 * 1024, maxFields: Int = 256, maxInterimBlocks: Int = 8) {
            self.maxHeadBytes = maxHeadBytes
            self.maxFields = maxFields
            self.maxInterimBlocks = maxInterimBlocks
        }
    }

    public enum Step: Sendable {
        /// The block goes on.
        case needMore
        /// A 1xx block ended; the final one follows.
        case interim
        /// The final head, checked.
        case head(status: Int, headers: HeaderFields)
        /// The head is unusable; the reason names no header value.
        case failed(String)
    }

    private let limits: Limits
    private var status: Int?
    private var fields: [(name: String, value: String)] = []
    private var blockBytes = 0
    private var interimBlocks = 0
    private var failure: String?

    public init(limits: Limits = .init()) {
        self.limits = limits
    }

    public mutating func feed(line: [UInt8]) -> Step {
        line.withUnsafeBytes { feed(line: $0) }
    }

    /// One line including its line ending; an empty line ends the block.
    public mutating func feed(line raw: UnsafeRawBufferPointer) -> Step {
        if let failure { return .failed(failure) }
        blockBytes += raw.count
        guard blockBytes <= limits.maxHeadBytes else { return fail("the upstream's response head is larger than Parley accepts") }

        var end = raw.count
        if end > 0, raw[end - 1] == 0x0A { end -= 1 }
        if end > 0, raw[end - 1] == 0x0D { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[0..<end])

        if line.isEmpty { return endOfBlock() }
        if line.contains(0x00) || line.contains(0x0D) || line.contains(0x0A) {
            return fail("the upstream's response head contains NUL or a bare CR")
        }
        guard status != nil else {
            guard let parsed = Self.statusCode(line) else { return fail("the upstream did not answer with a valid HTTP status line") }
            status = parsed
            return .needMore
        }

        if line[0] == 0x20 || line[0] == 0x09 {
            // Obsolete line folding: continues the previous value with one space.
            guard !fields.isEmpty else { return fail("the upstream's response head starts with a continuation line") }
            fields[fields.count - 1].value += " " + Self.trimmed(line)
            return .needMore
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0 else {
            return fail("the upstream's response head has a line that is not a header field")
        }
        let name = UnsafeRawBufferPointer(rebasing: line[0..<colon])
        guard name.allSatisfy(Self.isTokenCharacter) else {
            return fail("the upstream's response head has an invalid field name")
        }
        guard fields.count < limits.maxFields else { return fail("the upstream sent more header fields than Parley accepts") }
        let value = UnsafeRawBufferPointer(rebasing: line[(colon + 1)...])
        fields.append((String(decoding: name, as: UTF8.self), Self.trimmed(value)))
        return .needMore
    }

    private mutating func endOfBlock() -> Step {
        guard let status else { return fail("the upstream did not answer with a valid HTTP status line") }
        if status < 200 {
            interimBlocks += 1
            guard interimBlocks <= limits.maxInterimBlocks else { return fail("the upstream sent too many interim responses") }
            reset()
            return .interim
        }
        if let problem = Self.framingProblem(fields) { return fail(problem) }
        var headers = HeaderFields()
        for field in fields { headers.append(field.name, field.value) }
        reset()
        return .head(status: status, headers: headers)
    }

    private mutating func reset() {
        status = nil
        fields = []
        blockBytes = 0
    }

    private mutating func fail(_ reason: String) -> Step {
        failure = reason
        fields = []
        return .failed(reason)
    }

    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`, `HTTP/3`, then one space and exactly three
    /// digits in 100–599, then the end or a space and any reason phrase.
    static func statusCode(_ line: UnsafeRawBufferPointer) -> Int? {
        let prefix = Array("HTTP/".utf8)
        guard line.count >= prefix.count + 5, line.starts(with: prefix) else { return nil }
        var i = prefix.count
        // Version: digit, optionally "." digit.
        guard Self.isDigit(line[i]) else { return nil }
        i += 1
        if i < line.count, line[i] == UInt8(ascii: ".") {
            i += 1
            guard i < line.count, Self.isDigit(line[i]) else { return nil }
            i += 1
        }
        guard i < line.count, line[i] == 0x20 else { return nil }
        i += 1
        guard i + 3 <= line.count else { return nil }
        var code = 0
        for j in i..<(i + 3) {
            guard Self.isDigit(line[j]) else { return nil }
            code = code * 10 + Int(line[j] - UInt8(ascii: "0"))
        }
        i += 3
        guard i == line.count || line[i] == 0x20 else { return nil }
        return (100...599).contains(code) ? code : nil
    }

    /// RFC 9112 §6.3: a response with both framings, or with `Content-Length` values
    /// that do not agree on one decimal number, cannot be relayed safely.
    static func framingProblem(_ fields: [(name: String, value: String)]) -> String? {
        var contentLength: String?
        var chunked = false
        for field in fields {
            let name = field.name.lowercased()
            if name == "transfer-encoding" {
                chunked = true
            } else if name == "content-length" {
                for part in field.value.split(separator: ",", omittingEmptySubsequences: false) {
                    let value = String(Self.trimmed(part))
                    guard !value.isEmpty, value.utf8.count <= 18, value.utf8.allSatisfy(Self.isDigit) else {
                        return "the upstream sent an invalid Content-Length"
                    }
                    if let contentLength, contentLength != value { return "the upstream sent conflicting Content-Length values" }
                    contentLength = value
                }
            }
        }
        if chunked && contentLength != nil { return "the upstream sent both Content-Length and Transfer-Encoding" }
        return nil
    }

    static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    /// RFC 9110 §5.6.2 `tchar`.
    static func isTokenCharacter(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    static func trimmed(_ bytes: UnsafeRawBufferPointer) -> String {
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
    }

    static func trimmed(_ s: Substring) -> Substring {
        var s = s
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return s
    }
}
