import ParleyEncoding
import Foundation
import Hummingbird
import ParleyCrypto

/// A header field (HTTPTypes' `HTTPField`, which Hummingbird does not re-export by name).
typealias HeaderField = HTTPFields.Element

extension HeaderField.Name {
    static let pragma = Self("Pragma")!
    static let csrfToken = Self("X-CSRF-Token")!
    static let smpAppcid = Self("X-SMP-APPCID")!
    static let smpAuthenticationStatus = Self("X-SMP-AUTHENTICATION-STATUS")!
}

/// Response builders and request helpers shared by the SMP and OAuth2 routes.
enum SimHTTP {
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func text(_ string: String, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "text/plain; charset=utf-8"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(string: string)))
    }

    static func html(_ string: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8",
                .cacheControl: "no-store",
            ],
            body: .init(byteBuffer: ByteBuffer(string: string))
        )
    }

    /// Streams a request body through SHA-256 without keeping it.
    static func digest(_ body: RequestBody) async throws -> (count: Int, sha256: String) {
        let hasher = SHA256Hasher()
        var count = 0
        for try await buffer in body {
            buffer.withUnsafeReadableBytes { hasher.update($0) }
            count += buffer.readableBytes
        }
        return (count, Hex.encode(hasher.finalize()))
    }

    /// Reads and throws away a request body, so the connection stays usable.
    static func drain(_ body: RequestBody) async throws {
        for try await _ in body {}
    }

    /// The body, refusing more than `limit` bytes (Hummingbird answers 413).
    static func collect(_ body: RequestBody, upTo limit: Int = 65536) async throws -> [UInt8] {
        let buffer = try await body.collect(upTo: limit)
        return Array(buffer.readableBytesView)
    }

    /// `user:password` from `Authorization: Basic …`, split at the first colon.
    static func basicCredentials(_ request: Request) -> (user: String, password: String)? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic",
            let decoded = Base64.decode(String(parts[1]).trimmingCharacters(in: .whitespaces))
        else { return nil }
        let text = String(decoding: decoded, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":") else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    /// The token of `Authorization: Bearer …`.
    static func bearerToken(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    /// Equality of two secrets in time independent of where they differ.
    static func secretsMatch(_ a: String, _ b: String) -> Bool {
        constantTimeEquals(SHA256.hash(Array(a.utf8)), SHA256.hash(Array(b.utf8)))
    }

    /// The value of cookie `name` in the request's `Cookie` headers.
    static func cookie(_ name: String, in request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let trimmed = pair.trimmingCharacters(in: .whitespaces)
                guard let equals = trimmed.firstIndex(of: "=") else { continue }
                if trimmed[..<equals] == name { return String(trimmed[trimmed.index(after: equals)...]) }
            }
        }
        return nil
    }

    /// `application/x-www-form-urlencoded` pairs in order (`+` is a space); none when broken.
    static func formPairs(_ text: some StringProtocol) -> [(name: String, value: String)] {
        (PercentEncoding.decodeForm(text) ?? []).map { (name: $0.0, value: $0.1) }
    }

    /// A form body's fields by name (the last of a repeated name wins; none when broken).
    static func formFields(_ body: RequestBody) async throws -> [String: String] {
        let bytes = try await collect(body)
        return Dictionary(formPairs(String(decoding: bytes, as: UTF8.self)).map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
    }

    /// One form component (client_secret_basic encodes id and secret this way); as given when broken.
    static func formDecode(_ text: String) -> String {
        PercentEncoding.decode(text, plusAsSpace: true).flatMap { String(validating: $0, as: UTF8.self) } ?? text
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters.
    static func formEncode(_ text: String) -> String {
        PercentEncoding.encodeFormComponent(text)
    }

    static func htmlEscape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

}
