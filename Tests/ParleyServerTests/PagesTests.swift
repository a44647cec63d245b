import AuthFlows
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Testing

/// Parley's own pages: complete message catalogs, the language a browser asks for, the one
/// stylesheet and the destinations' logos and accent colours, served under `style-src 'self'`.
@Suite struct PagesTests {
    // MARK: the catalogs

    /// Every key the pages can ask for: each notice, each end of a flow, each explained failure,
    /// each form error and each kind's next step, and every key written literally in Pages.swift.
    static func keysInUse() throws -> Set<String> {
        var keys: Set<String> = []
        for notice in PageNotice.allCases { keys.formUnion(["notice.\(notice.rawValue).title", "notice.\(notice.rawValue).text"]) }
        for status in FlowStatus.allCases { keys.formUnion(["done.\(status.rawValue).title", "done.\(status.rawValue).text"]) }
        for reason in FinishedPage.explainedReasons.union(["other"]) { keys.insert("failed.\(reason)") }
        for error in CredentialsForm.Error.allCases { keys.insert("form.error.\(error.rawValue)") }
        for kind in ["basic", "oauth2", "otp", "saml2", "other"] { keys.insert("confirm.next.\(kind)") }
        for age in [PageAge.justNow, .minutes(1), .minutes(2), .hours(1), .hours(2), .days(3)] { keys.insert(age.key) }
        let source = try String(contentsOfFile: packageRoot + "/Sources/ParleyServer/Pages/Pages.swift", encoding: .utf8)
        for match in source.matches(of: #/text\("([a-zA-Z]+\.[a-zA-Z.]+)"/#) { keys.insert(String(match.output.1)) }
        return keys
    }

    static func placeholders(_ text: String) -> Set<String> {
        Set(text.matches(of: #/\{([a-z]+)\}/#).map { String($0.output.1) })
    }

    @Test func everyCatalogHasEveryKeyWithTheSamePlaceholders() throws {
        let english = try #require(PageCatalogs.embedded.texts[.en])
        let used = try Self.keysInUse()
        #expect(used.subtracting(english.keys).isEmpty, "keys the pages use that English lacks: \(used.subtracting(english.keys).sorted())")
        #expect(Set(english.keys).subtracting(used).isEmpty, "keys no page uses: \(Set(english.keys).subtracting(used).sorted())")
        for language in PageLanguage.allCases {
            let catalog = try #require(PageCatalogs.embedded.texts[language], "\(language)")
            #expect(Set(catalog.keys) == Set(english.keys), "\(language) misses \(Set(english.keys).subtracting(catalog.keys).sorted()), has extra \(Set(catalog.keys).subtracting(english.keys).sorted())")
            for (key, text) in catalog {
                #expect(!text.trimmingCharacters(in: .whitespaces).isEmpty, "\(language) \(key) is empty")
                #expect(Self.placeholders(text) == Self.placeholders(english[key] ?? ""), "\(language) \(key): placeholders differ from English")
            }
        }
    }

    @Test func theEmbeddedCopiesAreTheFiles() throws {
        let folder = packageRoot + "/Sources/ParleyServer/Pages/"
        #expect(try String(contentsOfFile: folder + "style.css", encoding: .utf8) == EmbeddedPages.stylesheet, "run scripts/embed-resources.sh")
        #expect(try String(contentsOfFile: folder + "parley.js", encoding: .utf8) == EmbeddedPages.browserModule, "run scripts/embed-resources.sh")
        for (language, json) in EmbeddedPages.catalogs {
            #expect(try String(contentsOfFile: folder + "messages.\(language).json", encoding: .utf8) == json, "run scripts/embed-resources.sh")
        }
        #expect(EmbeddedPages.catalogs.map(\.language).sorted() == PageLanguage.allCases.map(\.rawValue).sorted())
    }

    @Test func aPlaceholderIsFilledOnceAndAValueIsNeverReadAsOne() {
        #expect(PageCatalogs.filled("Sign in to {service}?", ["service": "{age} & Co"]) == "Sign in to {age} & Co?")
        #expect(PageCatalogs.filled("{a}{b} {c", ["a": "1", "b": "{a}"]) == "1{a} {c")
        #expect(PageCatalogs.filled("no {such}", ["other": "x"]) == "no {such}")
    }

    // MARK: the language

    @Test(arguments: [
        (nil, PageLanguage.en), ("de", .de), ("de-DE,de;q=0.9,en;q=0.8", .de), ("en-US,en;q=0.9,de;q=0.8", .en), ("fr, de;q=0.5", .de),
        ("DE-at", .de), ("de;q=0", .en), ("de;q=0, *", .en), ("*", .en), ("fr", .en), ("en;q=0.5, de;q=0.6", .de), ("de;q=abc", .en),
        (";;,,q=", .en), ("de;q=1.5", .en), (String(repeating: "de,", count: 2000), .en),
    ] as [(String?, PageLanguage)])
    func theBrowsersLanguageWins(header: String?, expected: PageLanguage) {
        #expect(PageLanguage.negotiated(header) == expected, "\(header ?? "nil")")
    }

    // MARK: branding

    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 0, count: 24)

    @Test func anAccentGetsItsOwnRuleAndAReadableLabelColour() throws {
        var yellow = DestinationSpec(name: "yellow", url: "https://y.example")
        yellow.branding = .init(accent: "#FFD700")
        var blue = DestinationSpec(name: "blue", url: "https://b.example")
        blue.branding = .init(accent: "#0a5fc2")
        let plain = DestinationSpec(name: "plain", url: "https://p.example")
        let assets = PageAssets(destinations: [try yellow.validated(), try blue.validated(), try plain.validated()])
        let css = try #require(assets.files[String(assets.stylesheetPath.dropFirst("/pages/".count))])
        let text = String(buffer: css.bytes)
        #expect(text.hasPrefix(EmbeddedPages.stylesheet))
        #expect(assets.brandClass(of: "blue") == "brand-1" && assets.brandClass(of: "yellow") == "brand-2" && assets.brandClass(of: "plain") == nil)
        #expect(text.contains(".brand-1 { --accent: #0a5fc2; --on-accent: #ffffff; }"))
        #expect(text.contains(".brand-2 { --accent: #ffd700; --on-accent: #111111; }"), "dark text on a light accent")
        #expect(assets.stylesheetPath.hasPrefix("/pages/style-") && assets.stylesheetPath.hasSuffix(".css"))
        #expect(assets.stylesheetPath != PageAssets(destinations: []).stylesheetPath, "another stylesheet, another name")
    }

    @Test func brandingIsCheckedAtStart() throws {
        for (accent, logo) in [("red", nil), ("#12345", nil), ("#12345g", nil), (nil, "logo.png"), (nil, "")] as [(String?, String?)] {
            var spec = DestinationSpec(name: "d", url: "https://d.example")
            spec.branding = .init(logo: logo, accent: accent)
            #expect(throws: DestinationSpec.Invalid.self, "\(accent ?? "-") \(logo ?? "-")") { try spec.validated() }
        }
        #expect((try? PageLogo.make(Self.png).get())?.contentType == "image/png")
        #expect((try? PageLogo.make([0xFF, 0xD8, 0xFF, 0xE0, 0, 0]).get())?.contentType == "image/jpeg")
        for bytes in [Array("<svg onload=alert(1)>".utf8), [], Array(repeating: 0x89, count: 8)] {
            #expect(throws: PageLogoProblem.self) { try PageLogo.make(bytes).get() }
        }
        #expect(throws: PageLogoProblem.self) { try PageLogo.make(Self.png + Array(repeating: 0, count: DestinationSpec.maxLogoBytes)).get() }
    }

    /// A logo that is missing, too large or not an image stops the start with its reason.
    @Test func aBadLogoFileStopsTheStart() throws {
        let folder = (try ScratchFile.write("", suffix: ".d") as NSString).deletingLastPathComponent
        let big = try ScratchFile.write("", suffix: "-big.png")
        let text = try ScratchFile.write("<svg/>", suffix: "-logo.svg")
        let good = try ScratchFile.write("", suffix: "-logo.png")
        try Data(Self.png + Array(repeating: 0, count: DestinationSpec.maxLogoBytes)).write(to: URL(fileURLWithPath: big))
        try Data(Self.png).write(to: URL(fileURLWithPath: good))
        func destinations(_ logo: String) -> [Destination] {
            var spec = DestinationSpec(name: "d", url: "https://d.example")
            spec.branding = .init(logo: logo)
            return (try? spec.validated()).map { [$0] } ?? []
        }
        for (path, reason) in [(folder + "/missing.png", "cannot read"), (big, "a logo is at most"), (text, "is not a PNG or JPEG")] {
            let read = PageAssets.readLogos(destinations(path))
            #expect(read.logos.isEmpty)
            #expect(read.problems.count == 1 && read.problems.first?.contains(reason) == true, "\(read.problems)")
            #expect(read.problems.first?.hasPrefix("destination 'd': branding.logo") == true)
        }
        let read = PageAssets.readLogos(destinations(good))
        #expect(read.problems.isEmpty && read.logos["d"]?.bytes == Self.png)
    }

    // MARK: the served pages

    /// A branded destination's flow URL in German: the page speaks German, links the one hashed
    /// stylesheet and the logo, both served with long caching, and still carries no inline code.
    @Test func aBrandedPageInGermanWithItsStylesheetAndLogo() async throws {
        var spec = DestinationSpec(name: "form", url: "https://form.example", basic: .init(form: true))
        spec.displayName = "Reisekosten"
        spec.branding = .init(accent: "#c0392b")
        var configuration = ParleyConfiguration(
            server: .init(publicURL: "https://parley.example/sso"), database: .init(url: ""), keys: .init(keyRing: testKeyRing()),
            destinations: [try spec.validated()])
        configuration.pageLogos = ["form": try PageLogo.make(Self.png).get()]
        let app = try buildApplication(configuration: configuration, dependencies: .inMemory(transport: FakeTransport { _ in .text(401) }), logger: quietLogger)
        try await app.test(.router) { client in
            let (_, start) = try await FlowConfirmationRouterTests.registrationWithFlow(client, "form", kind: "basic", prefix: "https://parley.example/sso")
            let page = try await client.execute(uri: start, method: .get, headers: [.acceptLanguage: "de-CH, en;q=0.5"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentLanguage] == "de")
                #expect(response.headers[.vary] == "Accept-Language")
                #expect(response.headers[.contentSecurityPolicy]?.contains("style-src 'self'") == true)
                return String(buffer: response.body)
            }
            for expected in [
                "<html lang=\"de\">", "<h1>Bei Reisekosten anmelden?</h1>", "<dd id=\"app\">nicht angegeben</dd>", "<dt>Gerätetyp</dt>",
                "<button type=\"submit\">Weiter zu Reisekosten</button>", "class=\"brand-1\"", "<span>Reisekosten</span>",
            ] {
                #expect(page.contains(expected), "\(expected) in \(page)")
            }
            #expect(!page.contains("<script") && !page.contains("style="))
            let stylesheet = try #require(page.firstMatch(of: #/href="/sso(/pages/style-[0-9a-f]{16}\.css)"/#)?.output.1)
            let logo = try #require(page.firstMatch(of: #/src="/sso(/pages/logo-[0-9a-f]{16}\.png)"/#)?.output.1)
            try await client.execute(uri: String(stylesheet), method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "text/css; charset=utf-8")
                #expect(response.headers[.cacheControl] == "public, max-age=31536000, immutable")
                #expect(String(buffer: response.body).contains(".brand-1 { --accent: #c0392b;"))
            }
            try await client.execute(uri: String(logo), method: .get) { response in
                #expect(response.status == .ok && response.headers[.contentType] == "image/png")
                #expect(Array(buffer: response.body) == Self.png)
                #expect(response.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
            }
            for path in ["/pages/style-0000000000000000.css", "/pages/", "/pages/..%2fflows", "/pages/logo.png"] {
                try await client.execute(uri: path, method: .get) { #expect($0.status == .notFound, "\(path)") }
            }
            // English for a browser that asks for it, and for one that asks for nothing Parley speaks.
            for header in ["en-GB", "fr-FR, ja;q=0.8"] {
                try await client.execute(uri: start, method: .get, headers: [.acceptLanguage: header]) { response in
                    #expect(String(buffer: response.body).contains("<h1>Sign in to Reisekosten?</h1>"), "\(header)")
                    #expect(response.headers[.contentLanguage] == "en")
                }
            }
        }
    }

    /// The end pages say in words what happened and what to do, in the browser's language.
    @Test func theDonePageExplainsAFailureInTheBrowsersLanguage() {
        let pages = Pages(destinations: [:], assets: PageAssets(destinations: []), publicURL: "https://parley.example")
        let failed = FinishedPage(
            service: "sales", status: .failed, reason: "identity_mismatch", age: .minutes(3),
            requester: PageRequester(app: "com.example.sales", deviceType: "iPhone", deviceModel: "iPhone15,3"))
        let english = pages.document(.finished(failed), language: .en)
        #expect(english.status == .forbidden)
        #expect(english.html.contains("<h1>Sign-in failed</h1>") && english.html.contains("someone other than the person"))
        #expect(english.html.contains("Asked for by com.example.sales on iPhone (iPhone15,3)."))
        let german = pages.document(.finished(failed), language: .de)
        #expect(german.html.contains("<h1>Anmeldung fehlgeschlagen</h1>") && german.html.contains("Angefragt von com.example.sales auf iPhone (iPhone15,3)."))
        let expired = pages.document(.notice(.expired, service: "sales", age: .minutes(12)), language: .en)
        #expect(expired.status == .gone && expired.html.contains("This sign-in was started 12 minutes ago."))
        #expect(expired.html.contains("data-parley-error=\"flow_expired\""))
        let unknown = pages.document(.finished(FinishedPage(service: nil, status: .failed, reason: "x\"<b>", age: .justNow, requester: nil)), language: .en)
        #expect(!unknown.html.contains("x\"<b>") && unknown.html.contains("did not accept the sign-in"), "an unexplained reason is not shown")
    }
}
