// What the benchmarks run on: an in-memory upstream, cookie and token stores, and
// realistic header sets. Nothing here touches a socket, a database or a file.
import AuthFlows
import Conversation
import Foundation
import Logging
import ParleyCrypto
import Synchronization

/// The upstream as the engine sees it: one prebuilt answer, no I/O, no suspension.
/// The headers are shared (copy-on-write), so the transport itself allocates only
/// the response body's source, as a real transport must.
struct CannedTransport: Transport {
    let status: Int
    let headers: HeaderFields
    let body: [UInt8]

    func send(_ request: UpstreamRequest) async throws -> UpstreamResponse {
        UpstreamResponse(status: status, headers: headers, body: .bytes(body))
    }
}

/// A registration's cookie rows as the server's cache hands them over: one `CookieJarIndex`
/// per jar, which answers the `Cookie` header (as `PostgresCookies` does).
final class MemoryCookieRecords: CookieRecords {
    private let jars: Mutex<[String: CookieJarIndex]>

    init(_ jars: [String: [StoredCookie]] = [:]) { self.jars = Mutex(jars.mapValues(CookieJarIndex.init)) }

    private func jar(_ registrationID: String) -> CookieJarIndex {
        jars.withLock { $0[registrationID] } ?? CookieJarIndex.empty
    }

    func cookies(registrationID: String) async throws -> [StoredCookie] { jar(registrationID).cookies }

    func cookieHeader(registrationID: String, for url: URLParts, at now: Date) async throws -> String? {
        jar(registrationID).header(for: url, at: now)
    }

    func apply(registrationID: String, store: [StoredCookie], delete: [(name: String, domain: String, path: String)]) async throws {
        jars.withLock { jars in
            var jar = jars[registrationID]?.cookies ?? []
            jar.removeAll { old in
                delete.contains { $0.name == old.name && $0.domain == old.domain && $0.path == old.path }
                    || store.contains { $0.name == old.name && $0.domain == old.domain && $0.path == old.path }
            }
            jars[registrationID] = CookieJarIndex(jar + store)
        }
    }
}

/// A token store that always holds one fresh token: the proxy path with the token
/// already cached on this instance (no token endpoint call, no database read).
struct FreshTokenStore: TokenStore, TokenAccess {
    let token = StoredToken(
        accessToken: String(repeating: "a", count: 40), refreshToken: nil, tokenType: "Bearer",
        expiresAt: Date().addingTimeInterval(24 * 3600))

    func load(_ key: TokenKey) async throws -> StoredToken? { token }
    func save(_ token: StoredToken, for key: TokenKey, grant: OAuth2Settings.Grant) async throws {}
    func delete(_ key: TokenKey) async throws {}
    func exclusively<T: Sendable>(_ key: TokenKey, _ body: @Sendable (any TokenAccess) async throws -> T) async throws -> T {
        try await body(self)
    }
}

enum Fixtures {
    static let host = "upstream.example"
    static let baseURL = "https://upstream.example:8443/sap/opu/odata"
    static let upstreamURL = baseURL + "/ZBENCH_SRV/Items('4711')/Lines?$top=50&$format=json"

    /// One destination without auth blocks (what `make bench` proxies to) and one with
    /// an OAuth2 client-credentials block (bearer token injected by the request filter).
    static let destinations: [Destination] = {
        let yaml = """
            destinations:
              - name: plain
                url: \(baseURL)
              - name: bearer
                url: \(baseURL)
                oauth2:
                  grant: client_credentials
                  tokenEndpoint: https://as.example/oauth/token
                  clientId: parley
                  clientSecret: bench-secret
            """
        do { return try DestinationsDocument.read(yaml, source: "benchmarks") } catch {
            fatalError("benchmark destinations: \(error)")
        }
    }()

    static func destination(_ name: String) -> Destination { destinations.first { $0.name == name }! }

    /// What a thin client sends through `/v1/proxy` after `ProxyRules.forwardable`:
    /// end-to-end headers only (no Authorization, Cookie, Host, hop-by-hop, X-Forwarded-*).
    static let forwardedRequestHeaders: [(String, String)] = [
        ("Accept", "application/json"),
        ("Accept-Encoding", "gzip, deflate, br"),
        ("Accept-Language", "de-DE,de;q=0.9,en;q=0.8"),
        ("User-Agent", "ParleyBench/1.0 (Linux; x86_64) CFNetwork/1410.0.3"),
        ("Cache-Control", "no-cache"),
        ("If-None-Match", "W/\"datetime'2026-11-21T15%3A02%3A00.0000000Z'\""),
        ("X-Request-Id", "5f0c7c1e-33a1-4f7e-9d1a-8c2b7b5e9e01"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("sap-language", "DE"),
        ("MaxDataServiceVersion", "2.0"),
        ("DataServiceVersion", "2.0"),
        ("sap-contextid-accept", "header"),
    ]

    /// The full client request head as Hummingbird hands it over (16 fields), before
    /// filtering: what `ProxyRules.forwardable` receives.
    static let clientRequestHeaders: [(String, String)] =
        [
            ("Host", "parley.example:8080"),
            ("Authorization", "Bearer pct_" + String(repeating: "x", count: 43)),
            ("Connection", "keep-alive"),
            ("X-Forwarded-For", "203.0.113.7"),
        ] + forwardedRequestHeaders

    /// An upstream's answer head (16 fields), as libcurl hands it to the transport.
    static let responseHeaderLines: [String] = [
        "HTTP/1.1 200 OK",
        "Date: Sat, 21 Nov 2026 15:02:00 GMT",
        "Server: SAP NetWeaver Application Server 7.54 / ICM 7.54",
        "Content-Type: application/json; charset=utf-8",
        "Content-Length: 1834",
        "Connection: keep-alive",
        "Keep-Alive: timeout=20, max=100",
        "Cache-Control: no-store, no-cache",
        "ETag: W/\"datetime'2026-11-21T15%3A02%3A00.0000000Z'\"",
        "Vary: Accept-Encoding",
        "dataserviceversion: 2.0",
        "sap-metadata-last-modified: Fri, 20 Nov 2026 09:12:44 GMT",
        "sap-processing-info: ODataBEP=,crp=,RAL=,st=,MedCacheHub=SHM,codeployed=X,softstate=",
        "X-Content-Type-Options: nosniff",
        "Strict-Transport-Security: max-age=31536000; includeSubDomains",
        "Set-Cookie: SAP_SESSIONID_BEN_100=Zx8yq3bQk1d9UGl6bVh0Q2ZzT0NlY2tpZ0FBQUFB%3d; path=/; secure; HttpOnly",
        "Set-Cookie: sap-usercontext=sap-client=100; path=/",
        "",
    ].map { $0 + "\r\n" }

    static let responseHeaders: HeaderFields = {
        var parser = ResponseHeadParser()
        for line in responseHeaderLines {
            if case .head(_, let headers) = parser.feed(line: Array(line.utf8)) { return headers }
        }
        fatalError("the benchmark's response head does not parse")
    }()

    /// The same answer without Set-Cookie (the common case: no cookie update).
    static let responseHeadersNoCookies: HeaderFields = {
        var headers = responseHeaders
        headers.remove("Set-Cookie")
        return headers
    }()

    static let responseBody = Array(#"{"d":{"results":[{"Item":"4711","Line":1,"Qty":"3.000"}]}}"#.utf8)

    /// A jar of `count` cookies for the upstream host and a few neighbours, with a mix of
    /// paths, host-only and domain cookies, session and persistent ones; about a
    /// third match `upstreamURL`.
    static func jar(_ count: Int, now: Date = Date()) -> [StoredCookie] {
        let paths = ["/", "/sap", "/sap/opu/odata", "/sap/opu/odata/ZBENCH_SRV", "/sap/bc/ui5_ui5", "/other"]
        let domains: [(String, Bool)] = [(host, true), ("example", false), ("static.example", true), ("upstream.example", false)]
        return (0..<count).map { i in
            let (domain, hostOnly) = domains[i % domains.count]
            return StoredCookie(
                name: "cookie\(i)", value: String(repeating: "v", count: 24 + i % 40), domain: domain, path: paths[i % paths.count],
                hostOnly: hostOnly, secure: i % 3 != 2, httpOnly: i % 2 == 0,
                expiresAt: i % 5 == 0 ? nil : now.addingTimeInterval(Double(3600 * (1 + i))))
        }
    }

    /// Typical `Set-Cookie` values from SAP and web upstreams.
    static let setCookies = [
        "SAP_SESSIONID_BEN_100=Zx8yq3bQk1d9UGl6bVh0Q2ZzT0NlY2tpZ0FBQUFB%3d; path=/; secure; HttpOnly",
        "sap-usercontext=sap-client=100; path=/",
        "MYSAPSSO2=AjExMDAgAA1wb3J0YWw6VVNFUjAxiAAHZGVmYXVsdAEABlVTRVIwMQIAAzEwMAMAA0JFTgQADDIwMjYxMTIxMTUwMgUABAAAAAgKAAZVU0VSMDH%2fAQUwggEBBgkqhkiG9w0BBwKggfMwgfACAQExCzAJBgUrDgMCGgUAMAsGCSqGSIb3DQEHATGB0DCBzQIBATAiMB0xDDAKBgNVBAMTA0JFTjENMAsGA1UECxMESjJFRQIBADAJBgUrDgMCGgUAoF0wGAYJKoZIhvcNAQkDMQsGCSqGSIb3DQEHATAcBgkqhkiG9w0BCQUxDxcNMjYxMTIxMTUwMjAwWjAjBgkqhkiG9w0BCQQxFgQU; path=/; domain=upstream.example; secure; HttpOnly",
        "__Host-session=8c2b7b5e9e015f0c7c1e33a14f7e9d1a; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=1800",
        "tracking=1; Expires=Wed, 21 Oct 2027 07:28:00 GMT; Domain=.upstream.example; Path=/sap",
    ]

    static let keyRing: KeyRing = {
        do { return try KeyRing(keys: [("k1", (0..<32).map { UInt8($0) }), ("k0", (0..<32).map { UInt8(255 - $0) })]) } catch {
            fatalError("benchmark key ring: \(error)")
        }
    }()

    static let logger: Logger = {
        var logger = Logger(label: "parley.bench")
        logger.logLevel = .warning  // as `make bench` runs Parley
        return logger
    }()

    /// A manager for `destination` exactly as the server builds one (`makeManager`).
    static func manager(
        destination: String, transport: CannedTransport, cookies: [StoredCookie], oauth2: Bool = false
    ) -> ConversationManager {
        let records = MemoryCookieRecords(["reg-1": cookies])
        let broker = oauth2 ? OAuth2Broker(store: FreshTokenStore(), clock: SystemClock(), logger: logger) : nil
        let configurator = DestinationConfigurator(
            transport: transport, cookieRecords: records, csrfTokens: CSRFTokenCache(), clock: SystemClock(), oauth2: broker,
            logger: logger)
        return configurator.makeManager(for: Self.destination(destination), registration: RegistrationMaterial(registrationID: "reg-1"))
    }
}
