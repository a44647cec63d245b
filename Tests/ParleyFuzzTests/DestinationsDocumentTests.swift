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

    @Test func aFileThatIsNotADestinationsDocumentSaysWhere() {
        #expect {
            try DestinationsDocument.decode("destinations:\n  - name: a\n", source: "d.yaml")
        } throws: { error in
            (error as? DestinationSpec.Invalid)?.problems == ["d.yaml: missing 'url' at .destinations[0]"]
        }
    }
}
