import AuthFlows
import Foundation
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

    /// A misspelt key must not fail open: `registration: { polcy: approval }` would start an
    /// open destination. Every key no type knows, at every level, is a problem naming the key,
    /// its place and the nearest known key, reported with every other problem of the file.
    @Test func everyUnknownKeyIsAProblemWithItsPlaceAndTheNearestKnownKey() {
        let text = """
            destinations:
              - name: a
                url: "https://a.example"
              - name: b
                url: "https://b.example"
                oauth:
                  grant: client_credentials
              - name: sim
                url: "https://sim.example"
                registration: { polcy: approval }
                basic: { from: true }
                saml2: { finishEndpont: /x }
                otp: { passcodeFeild: code, additionalParams: { anything: goes } }
                identity: { mach: email }
                timeouts: { totalSecond: 3 }
                smp: { appId: x, appID: y }
                oauth2:
                  grant: client_credentials
                  tokenEndpoint: "https://as.example/t"
                  clientId: c
                  clientSecret: s
                  isuer: "https://as.example"
                  challenge: { statusses: [401] }
                  scopeKeys: [{ prefix: "https://sim.example/a", key: "https://sim.example/a", kye: k }]
              - name: "bad name"
                url: "https://c.example"
            identityProviders:
              - { issuer: "https://idp.example", jwksUri: "https://idp.example/jwks", audiences: [p], userclaim: email }
            identityProvider: []
            x-defaults: &defaults { csrf: true }
            """
        let expected = [
            "destinations: unknown key 'oauth' at destinations[1] (b).oauth (did you mean 'oauth2'?)",
            "destinations: unknown key 'polcy' at destinations[2] (sim).registration.polcy (did you mean 'policy'?)",
            "destinations: unknown key 'from' at destinations[2] (sim).basic.from (did you mean 'form'?)",
            "destinations: unknown key 'appID' at destinations[2] (sim).smp.appID (did you mean 'appId'?)",
            "destinations: unknown key 'totalSecond' at destinations[2] (sim).timeouts.totalSecond (did you mean 'totalSeconds'?)",
            "destinations: unknown key 'finishEndpont' at destinations[2] (sim).saml2.finishEndpont (did you mean 'finishEndpoint'?)",
            "destinations: unknown key 'passcodeFeild' at destinations[2] (sim).otp.passcodeFeild (did you mean 'passcodeField'?)",
            "destinations: unknown key 'statusses' at destinations[2] (sim).oauth2.challenge.statusses (did you mean 'statuses'?)",
            "destinations: unknown key 'kye' at destinations[2] (sim).oauth2.scopeKeys[0].kye (did you mean 'key'?)",
            "destinations: unknown key 'isuer' at destinations[2] (sim).oauth2.isuer (did you mean 'issuer'?)",
            "destinations: unknown key 'mach' at destinations[2] (sim).identity.mach (did you mean 'match'?)",
            "destinations: unknown key 'userclaim' at identityProviders[0].userclaim (did you mean 'userClaim'?)",
            "destinations: unknown key 'identityProvider' at identityProvider (did you mean 'identityProviders'?)",
            "destination 'bad name': name must be letters, digits, '-', '_' or '.'",
            // A provider is listed, so a destination where a person signs in requires verified users by default.
            "destination 'sim': registration.identity is required (the default where the file lists identityProviders; write registration: {identity: optional} to let unverified users sign in), but saml2 sign-ins name nobody without saml2.idpCertificates",
        ]
        var problems: [String] = []
        do { _ = try DestinationsDocument.read(text) } catch { problems = error.problems }
        #expect(Set(problems) == Set(expected), "\(problems)")
        #expect(problems.count == expected.count)
        // The whole file as the server loads it says the same.
        #expect(throws: DestinationSpec.Invalid.self) { try DestinationsDocument.decodeContents(text) }
    }

    /// A decoding error (a required key misspelt) is reported with the unknown keys of the
    /// entries that decoded, and names the key that was probably meant.
    @Test func aMissingKeyNamesItsLikelyMisspellingAndTheOtherUnknownKeys() {
        let text = """
            destinations:
              - { name: a, url: "https://a.example", csrff: true }
              - { name: b, url: "https://b.example", smp: { appid: x } }
            """
        var problems: [String] = []
        do { _ = try DestinationsDocument.read(text) } catch { problems = error.problems }
        #expect(
            problems == [
                "destinations: missing 'appId' at .destinations[1].smp (is 'appid' a misspelling?)",
                "destinations: unknown key 'csrff' at destinations[0] (a).csrff (did you mean 'csrf'?)",
            ])
    }

    /// The files people copy still load: the Kubernetes example's destinations, the demo's
    /// (`scripts/run.sh`), and every destinations example in docs/api.md.
    @Test func theExampleFilesStillLoad() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let secret = try String(contentsOfFile: root + "/deploy/kubernetes/secret.example.yaml", encoding: .utf8)
        let embedded = try #require(secret.components(separatedBy: "destinations.yaml: |\n").last)
        let kubernetes = embedded.split(separator: "\n", omittingEmptySubsequences: false).map { $0.hasPrefix("    ") ? String($0.dropFirst(4)) : String($0) }
        #expect(try DestinationsDocument.readContents(kubernetes.joined(separator: "\n")).destinations.count >= 1)

        let script = try String(contentsOfFile: root + "/scripts/run.sh", encoding: .utf8)
        let heredoc = try #require(script.components(separatedBy: "<<YAML\n").dropFirst().first?.components(separatedBy: "\nYAML\n").first)
        // The script fills in its ports and, for demo-cert, the PKCS#12 and CA it makes at start:
        // every key is checked with stand-ins for those two, every other destination in full.
        let demo = heredoc.replacingOccurrences(of: "$sim_port", with: "8081").replacingOccurrences(of: "$sim", with: "http://127.0.0.1:8081")
            .replacingOccurrences(of: "$tls_port", with: "8443").replacingOccurrences(of: "$public_encoded", with: "http%3A%2F%2F127.0.0.1%3A8080")
            .replacingOccurrences(of: #"$(base64 -w0 "$tls/client.p12")"#, with: "cGtjczEy")
            .replacingOccurrences(of: #"$(sed 's/^/      /' "$tls/ca.pem")"#, with: "      -----BEGIN CERTIFICATE-----")
            .replacingOccurrences(of: "$tls", with: ".local/tls")
        #expect(!demo.contains("$"), "a substitution of run.sh the test does not make: \(demo)")
        let names = ["demo", "demo-client", "demo-oauth", "demo-saml", "demo-otp", "demo-form", "demo-password", "demo-cert"]
        #expect(try DestinationsDocument.decodeContents(demo).destinations.map(\.name) == names)
        let withoutCertificate = try #require(demo.components(separatedBy: "  - name: demo-cert").first)
        #expect(try DestinationsDocument.readContents(withoutCertificate).destinations.map(\.name) == names.dropLast())

        let api = try String(contentsOfFile: root + "/docs/api.md", encoding: .utf8)
        let blocks = api.components(separatedBy: "```yaml\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
            .filter { $0.contains("destinations:") }
        #expect(!blocks.isEmpty)
        for block in blocks {
            #expect(throws: Never.self, "\(block.prefix(80))") { try DestinationsDocument.decodeContents(block) }
        }
    }
}
