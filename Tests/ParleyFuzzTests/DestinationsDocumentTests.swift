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

    @Test func aFileThatIsNotADestinationsDocumentSaysWhere() {
        #expect {
            try DestinationsDocument.decode("destinations:\n  - name: a\n", source: "d.yaml")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == ["d.yaml: missing 'url' at .destinations[0]"]
        }
    }
}
