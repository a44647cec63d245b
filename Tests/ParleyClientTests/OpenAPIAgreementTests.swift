import Foundation
import ParleyClient
import Testing

/// The client and `docs/openapi.json` cannot drift apart: every operation the client calls is in
/// the document, every member it sends is one the document takes, every member it reads is one
/// the document writes, and every problem code it names is one of the document's.
@Suite struct OpenAPIAgreementTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func document() throws -> [String: Any] {
        let data = try Data(contentsOf: root.appendingPathComponent("docs/openapi.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func schema(_ name: String) throws -> [String: Any] {
        let components = try #require(try document()["components"] as? [String: Any])
        let schemas = try #require(components["schemas"] as? [String: Any])
        return try #require(schemas[name] as? [String: Any], "no schema \(name)")
    }

    static func properties(_ name: String) throws -> Set<String> {
        Set((try schema(name)["properties"] as? [String: Any] ?? [:]).keys)
    }

    /// The stored properties of a value, by name (what its `Decodable` conformance reads).
    static func members(_ value: Any) -> Set<String> { Set(Mirror(reflecting: value).children.compactMap(\.label)) }

    @Test func everyOperationTheClientCallsIsInTheDocument() throws {
        let paths = try #require(try Self.document()["paths"] as? [String: [String: Any]])
        for (method, path) in ParleyAPI.operations {
            #expect(paths[path]?[method.lowercased()] != nil, "\(method) \(path) is not in docs/openapi.json")
        }
    }

    @Test func whatTheClientSendsAndReadsIsWhatTheDocumentSays() throws {
        let request = RegistrationRequest(
            deviceType: "t", deviceModel: "m", userHint: "u", returnUrl: "app://done", identityToken: "i",
            credentials: .init(username: "a", password: "b"))
        let sent = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(request)) as? [String: Any])
        let takes = try Self.properties("CreateRegistration")
        #expect(Set(sent.keys).subtracting(takes).isEmpty, "sent but not taken: \(Set(sent.keys).subtracting(takes))")
        #expect(takes.contains("destination"), "the client adds destination")

        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let flowJSON = #"{"id":"f","kind":"oauth2","status":"pending","url":"https://p.example/flows/f?k=s","expiresAt":"2026-11-29T10:00:00Z","error":null}"#
        let flow = try decoder.decode(Flow.self, from: Data(flowJSON.utf8))
        #expect(Self.members(flow).subtracting(try Self.properties("Flow")).isEmpty)
        let registrationJSON = """
            {"id":"r","destination":"d","status":"active","appcid":null,"deviceType":null,"deviceModel":null,"userHint":null,
             "user":{"issuer":"i","subject":"s","verified":true},"client":null,"createdAt":"2026-11-29T10:00:00Z","flow":\(flowJSON)}
            """
        let registration = try decoder.decode(Registration.self, from: Data(registrationJSON.utf8))
        #expect(Self.members(registration).subtracting(try Self.properties("Registration")).isEmpty)
        #expect(try Self.properties("RegistrationCreated").contains("clientToken") || Self.document().description.contains("clientToken"))
    }

    @Test func everyProblemCodeTheClientNamesIsTheDocuments() throws {
        let codes = Set(try Self.schema("ProblemCode")["enum"] as? [String] ?? [])
        #expect(!codes.isEmpty)
        #expect(ParleyError.codes.subtracting(codes).isEmpty, "\(ParleyError.codes.subtracting(codes))")
    }
}
