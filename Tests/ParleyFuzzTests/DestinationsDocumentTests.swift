import AuthFlows
import Testing

/// The destinations file's text to checked destinations, every problem at once.
@Suite struct DestinationsDocumentTests {
    @Test func aGoodFileReadsAsYAMLAndAsJSON() throws {
        let yaml = try DestinationsDocument.read("destinations:\n  - name: a\n    url: https://a.example/base/\n")
        let json = try DestinationsDocument.read(#"{"destinations": [{"name": "a", "url": "https://a.example/base/"}]}"#)
        #expect(yaml.map(\.baseURL) == ["https://a.example/base"])
        #expect(json.map(\.baseURL) == ["https://a.example/base"])
    }

    /// Found by the fuzzer: a fragment (which URLParts and libcurl drop, and every proxied
    /// path with it) and a second trailing '/' passed the checks.
    @Test func urlsThatWouldLoseOrDoubleThePathAreRefused() {
        let text = """
            destinations:
              - { name: a, url: "https://a.example/base#x" }
              - { name: b, url: "https://b.example/p q" }
              - { name: c, url: "https://c.example//" }
              - { name: c, url: "https://c.example" }
            """
        #expect {
            try DestinationsDocument.read(text)
        } throws: { error in
            let problems = (error as? DestinationSpec.Invalid)?.problems ?? []
            return problems == [
                "destination 'a': url must not have a fragment, spaces or control characters",
                "destination 'b': url must not have a fragment, spaces or control characters",
                "destination 'c': url must not end with '//'",
                "destination 'c' is defined twice",
            ]
        }
    }

    /// `displayName` names the destination on Parley's pages: the name unless given; some
    /// visible text, at most 100 characters, no control characters.
    @Test func displayNameDefaultsToTheNameAndIsChecked() throws {
        let good = try DestinationsDocument.read(
            "destinations:\n  - { name: a, url: \"https://a.example\" }\n  - { name: b, url: \"https://b.example\", displayName: \"SAP Sales (SMP) – Zürich\" }\n")
        #expect(good.map(\.displayName) == ["a", "SAP Sales (SMP) – Zürich"])
        let long = String(repeating: "x", count: 100)
        #expect(try DestinationsDocument.read("destinations: [{ name: a, url: \"https://a.example\", displayName: \"\(long)\" }]")[0].displayName == long)
        let text = """
            destinations:
              - { name: a, url: "https://a.example", displayName: "" }
              - { name: b, url: "https://b.example", displayName: "   " }
              - { name: c, url: "https://c.example", displayName: "\(long)y" }
              - { name: d, url: "https://d.example", displayName: "Sales\\u0007" }
              - { name: e, url: "https://e.example", displayName: "Sales\\nCorp" }
              - { name: f, url: "https://f.example", displayName: "Sales\\u0085" }
            """
        let expected = ["a", "b", "c", "d", "e", "f"].map { "destination '\($0)': displayName must be 1 to 100 characters without control characters" }
        #expect {
            try DestinationsDocument.read(text)
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == expected
        }
    }

    /// `oauth2.prompt`: absent, `login` unless the user is verified; given, that value for
    /// everyone (`""`: none); authorization code only; OpenID Connect's shape.
    @Test func oauth2PromptDefaultsToLoginUnlessVerifiedAndIsChecked() throws {
        func destination(_ prompt: String?, grant: String = "authorization_code") -> String {
            let value = prompt.map { ", prompt: \"\($0)\"" } ?? ""
            return "{ name: d, url: \"https://d.example\", oauth2: { grant: \(grant), authorizationEndpoint: \"https://as.example/a\", "
                + "tokenEndpoint: \"https://as.example/t\", clientId: c, clientSecret: s\(value) } }"
        }
        func prompt(_ text: String?) throws -> OAuth2Settings.Prompt? {
            try DestinationsDocument.read("destinations: [\(destination(text))]")[0].oauth2?.prompt
        }
        #expect(try prompt(nil) == .loginUnlessVerified)
        #expect(try prompt(nil)?.value(verifiedUser: false) == "login")
        #expect(try prompt(nil)?.value(verifiedUser: true) == nil)
        #expect(try prompt("consent") == .always("consent"))
        #expect(try prompt("login consent")?.value(verifiedUser: true) == "login consent")
        #expect(try prompt("") == .always(nil))
        #expect(try prompt("")?.value(verifiedUser: false) == nil)
        for bad in ["login\\n", " login", "login  consent", "log\\u0000in", "a=b", String(repeating: "x", count: 101)] {
            #expect(throws: DestinationSpec.Invalid.self, "\(bad)") { try prompt(bad) }
        }
        let problems: [String]
        do {
            _ = try DestinationsDocument.read("destinations: [\(destination("login", grant: "client_credentials"))]")
            problems = []
        } catch { problems = error.problems }
        #expect(problems == ["destination 'd': oauth2.prompt is sent with authorization requests, which only the authorization_code grant makes"])
    }

    @Test func aFileThatIsNotADestinationsDocumentSaysWhere() {
        #expect {
            try DestinationsDocument.decode("destinations:\n  - name: a\n", source: "d.yaml")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == ["d.yaml: missing 'url' at .destinations[0]"]
        }
    }
}
