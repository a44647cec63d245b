import Foundation
import ParleyTesting
import Testing
import UpstreamSimulator

@Suite("OAuth2 login in headless Chromium")
struct BrowserTests {
    @Test("a person signs in on /oauth/authorize and the browser lands on the redirect URI with code and state")
    func authorizationCodeInBrowser() async throws {
        try await withSimulator { port, state in
            let base = "http://127.0.0.1:\(port)"
            let redirectURI = base + "/echo/cb"
            let pkce = pkcePair()
            let authorizeURL =
                base + "/oauth/authorize?response_type=code&client_id=parley-public&redirect_uri=\(urlEncode(redirectURI))"
                + "&state=browser-state&code_challenge=\(pkce.challenge)&code_challenge_method=S256&scope=read"

            let landed = try await ChromeDriver.withSession { browser in
                try await browser.navigate(to: authorizeURL)
                let loginPage = try await browser.screenshotPNG()
                #expect(loginPage.starts(with: [0x89, 0x50, 0x4E, 0x47]))
                // To look at the page: PARLEY_SCREENSHOTS=/some/dir swift test --filter BrowserTests
                if let directory = ProcessInfo.processInfo.environment["PARLEY_SCREENSHOTS"] {
                    _ = FileManager.default.createFile(atPath: directory + "/oauth-login.png", contents: Data(loginPage))
                }
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "#login"))
                let url = try await browser.waitForURL(prefix: redirectURI + "?code=", timeout: .seconds(20))
                #expect(try await browser.pageSource().contains("/echo/cb"))
                return url
            }

            let query = queryItems(landed)
            #expect(query["state"] == "browser-state")
            let code = try #require(query["code"])
            #expect(state.oauth.authorizeLogins == 1)

            let tokens = try await postForm(
                port, "/oauth/token",
                [
                    ("grant_type", "authorization_code"), ("client_id", "parley-public"), ("code", code),
                    ("redirect_uri", redirectURI), ("code_verifier", pkce.verifier),
                ])
            #expect(tokens.status == 200)
            #expect(string(tokens, "access_token") != nil)
        }
    }
}
