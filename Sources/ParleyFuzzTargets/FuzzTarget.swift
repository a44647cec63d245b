/// One fuzz target per parser that reads untrusted bytes. `run` feeds one input through
/// the parser as the product does and returns the invariants the result broke (none when
/// all is well). A trap inside the parser is what libFuzzer reports as a crash; a broken
/// invariant is made a crash by the fuzz driver and an issue by the regression tests.
///
/// Inputs are text where a target needs more than one value, so that seeds are readable
/// and libFuzzer's mutations stay meaningful (the layout of each is on its case).
public enum FuzzTarget: String, CaseIterable, Sendable, Codable {
    /// An upstream's response head as libcurl hands it over: the input split after each
    /// `\n`, one line per `ResponseHeadParser.feed(line:)`.
    case responseHead = "response-head"
    /// `Cookies.parse`: `<request URL>\n<Set-Cookie value>`, or only the value (for
    /// `https://app.example.com/a/b`).
    case setCookie = "set-cookie"
    /// `TokenResponse.parse`: `<status> <Retry-After|-> <previous refresh token|->\n<body>`
    /// when the input starts with a digit; otherwise the whole input is a `200` body.
    case tokenResponse = "token-response"
    /// `ProxyPath.upstreamURL`: `<destination URL>\n<path>[?<query>]` (the request target
    /// after `/v1/proxy/`), or only the target (for `https://upstream.example/base`).
    case proxyPath = "proxy-path"
    /// The destinations file, bytes to checked `Destination`s and identity providers
    /// (`DestinationsDocument.readContents`).
    case destinations
    /// `PercentEncoding.decodeForm`: the query of `/callback/oauth2` and `/callback/otp`
    /// and the form bodies of the hosted pages.
    case callbackQuery = "callback-query"
    /// `SAMLIdentityReader.read`: the decoded `SAMLResponse` (XML), trusting the captured
    /// SimpleSAMLphp IdP's certificate (Tests/Fixtures/saml/captured).
    case samlResponse = "saml-response"
    /// `Userinfo.subject(from:)`: an OpenID Connect userinfo answer's body.
    case userinfo

    public func run(_ input: [UInt8]) -> [String] {
        switch self {
        case .responseHead: Targets.responseHead(input)
        case .setCookie: Targets.setCookie(input)
        case .tokenResponse: Targets.tokenResponse(input)
        case .proxyPath: Targets.proxyPath(input)
        case .destinations: Targets.destinations(input)
        case .callbackQuery: Targets.callbackQuery(input)
        case .samlResponse: Targets.samlResponse(input)
        case .userinfo: Targets.userinfo(input)
        }
    }
}
