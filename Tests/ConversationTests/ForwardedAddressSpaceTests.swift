import AuthFlows
import Conversation
import Foundation
import ParleyTesting
import Testing

/// The hosted upstream's two address spaces: what a prefix-aware upstream says in the
/// browser's space comes back into its own, and what it says in its own stays as it is.
@Suite struct ForwardedAddressSpaceTests {
    /// Parley behind `https://parley.example/pfx`, destination `sp` at `http://sp.internal:8443/base`.
    let space = ForwardedAddressSpace(publicBase: "https://parley.example/pfx/web/sp", upstreamBase: "http://sp.internal:8443/base")!
    /// The usual test set-up: both on loopback, the upstream at the root.
    let loopback = ForwardedAddressSpace(publicBase: "http://127.0.0.1:18080/web/sp", upstreamBase: "http://127.0.0.1:43297")!

    @Test(arguments: [
        ("https://parley.example/pfx/web/sp/SAMLAuthLauncher?finishEndpointParam=done",
         "http://sp.internal:8443/base/SAMLAuthLauncher?finishEndpointParam=done"),
        ("https://PARLEY.example:443/pfx/web/sp/a/b", "http://sp.internal:8443/base/a/b"),
        ("https://parley.example/pfx/web/sp", "http://sp.internal:8443/base/"),
        ("https://parley.example/pfx/web/sp?x=1", "http://sp.internal:8443/base/?x=1"),
        ("/pfx/web/sp/otp?redirecttooriginalurl=false", "http://sp.internal:8443/base/otp?redirecttooriginalurl=false"),
        ("//parley.example/pfx/web/sp/x", "http://sp.internal:8443/base/x"),
    ])
    func aLocationInTheBrowsersSpaceIsMappedBack(location: String, upstream: String) {
        #expect(space.upstreamLocation(location) == upstream)
    }

    @Test(arguments: [
        "http://sp.internal:8443/base/SAMLAuthLauncher",  // the upstream's own space
        "/base/SAMLAuthLauncher",  // path-absolute in the upstream's own space
        "SAMLAuthLauncher",  // relative: the same in both spaces
        "https://parley.example/pfx/web/spx/x",  // another destination's prefix, not a segment boundary
        "https://parley.example/pfx/flows/abc",  // Parley's own pages
        "http://parley.example/pfx/web/sp/x",  // another origin (scheme)
        "https://parley.example:8443/pfx/web/sp/x",  // another origin (port)
        "https://idp.example/sso?SAMLRequest=x",  // the identity provider
        "https://parley.example/pfx/web/sp/a b",  // a control character or space is never produced
    ])
    func aLocationOutsideTheBrowsersPrefixIsLeftAlone(location: String) {
        #expect(space.upstreamLocation(location) == nil)
    }

    /// Both readings of "scoped to the prefix" (Tomcat's context path without a trailing
    /// slash, and with one), paths below it, and the public host as `Domain`.
    @Test(arguments: [
        ("S=1; Path=/pfx/web/sp; HttpOnly", "S=1; Path=/base; HttpOnly"),
        ("S=1; Path=/pfx/web/sp/; HttpOnly", "S=1; Path=/base; HttpOnly"),
        ("S=1; Path=/pfx/web/sp/app; Secure", "S=1; Path=/base/app; Secure"),
        ("S=1; Domain=parley.example; Path=/pfx/web/sp", "S=1; Domain=sp.internal; Path=/base"),
        ("S=1; domain=.PARLEY.example; path=/pfx/web/sp/", "S=1; Domain=sp.internal; Path=/base"),
        ("S=1; Path=/base; HttpOnly", "S=1; Path=/base; HttpOnly"),
        ("S=1; Path=/", "S=1; Path=/"),
        ("S=1; Path=/pfx/web/spx", "S=1; Path=/pfx/web/spx"),
        ("S=1; Domain=other.example", "S=1; Domain=other.example"),
        ("S=1", "S=1"),
        ("broken", "broken"),
    ])
    func cookieAttributesInTheBrowsersSpaceAreMappedBack(header: String, stored: String) {
        #expect(space.upstreamSetCookie(header) == stored)
    }

    @Test func aCookieScopedToThePrefixCoversTheUpstreamRoot() {
        #expect(loopback.upstreamSetCookie("PYSP_SESSION=v; Path=/web/sp; HttpOnly") == "PYSP_SESSION=v; Path=/; HttpOnly")
        #expect(loopback.upstreamSetCookie("PYSP_SESSION=v; Domain=127.0.0.1; Path=/web/sp/") == "PYSP_SESSION=v; Domain=127.0.0.1; Path=/")
        #expect(loopback.upstreamLocation("http://127.0.0.1:18080/web/sp/saml/acs") == "http://127.0.0.1:43297/saml/acs")
    }

    /// The bug this exists for: a session cookie the service provider scoped to the browser's
    /// prefix is sent on the upstream's own finish endpoint, and by the API's manager too.
    @Test func aPrefixScopedSessionCookieIsSentOnTheFinishEndpoint() async throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let records = MemoryCookieRecords()
        let plain = RegistrationCookieJar(registrationID: "r1", records: records, clock: TestClock(now))
        let browser = ForwardedCookieJar(jar: plain, space: space)
        try await browser.store(
            setCookies: ["SP_SESSION=abc; Domain=parley.example; Path=/pfx/web/sp; HttpOnly"], from: "http://sp.internal:8443/base/saml/acs")
        #expect(try await browser.cookieHeader(for: "http://sp.internal:8443/base/SAMLAuthLauncher") == "SP_SESSION=abc")
        #expect(try await plain.cookieHeader(for: "http://sp.internal:8443/base/api/data") == "SP_SESSION=abc")
        #expect(try await plain.cookieHeader(for: "http://sp.internal:8443/other") == nil)

        // Without the mapping the same cookie would never be sent upstream (today's bug).
        try await plain.store(setCookies: ["RAW=1; Path=/pfx/web/sp"], from: "http://sp.internal:8443/base/saml/acs")
        #expect(try await plain.cookieHeader(for: "http://sp.internal:8443/base/SAMLAuthLauncher") == "SP_SESSION=abc")
    }
}
