import Foundation
import Logging
import UpstreamSimulator

/// `upstream-simulator [--host H] [--port P] [SAML options]`: prints one line once bound, stops on
/// SIGTERM/SIGINT. SAML options set the `/sp` service provider (its binding, header, OTP and
/// session-cookie scope) and the mock IdP (see `usage`).
@main struct Main {
    static func main() async throws {
        var host = "127.0.0.1"
        var port = 8081
        var configuration = SimulatorConfiguration()
        var arguments = CommandLine.arguments.dropFirst()
        var oauthUsers: [SimulatorUser]?
        while let argument = arguments.popFirst() {
            switch argument {
            case "--host":
                guard let value = arguments.popFirst() else { usage("--host needs a value") }
                host = value
            case "--port":
                guard let value = arguments.popFirst(), let number = Int(value), (0...65535).contains(number) else {
                    usage("--port needs a number in 0...65535")
                }
                port = number
            case "--saml-binding":
                guard let value = arguments.popFirst(), let binding = SAMLBinding(rawValue: value) else {
                    usage("--saml-binding needs postForm or redirect")
                }
                configuration.samlBinding = binding
            case "--no-identifying-header":
                configuration.samlIdentifyingHeader = false
            case "--otp":
                guard let value = arguments.popFirst(), let mode = SPOTPMode(rawValue: value) else {
                    usage("--otp needs off or afterSAML")
                }
                configuration.spOTP = mode
            case "--cookie-scope":
                guard let value = arguments.popFirst(), let scope = SPCookieScope(rawValue: value) else {
                    usage("--cookie-scope needs mount, forwardedPrefix or forwardedPrefixSlash")
                }
                configuration.spCookieScope = scope
            case "--cookie-domain":
                configuration.spCookieDomain = true
            case "--acs-url":
                guard let value = arguments.popFirst() else { usage("--acs-url needs a URL") }
                configuration.samlACSURLs.append(value)
            case "--idp-base":
                guard let value = arguments.popFirst() else { usage("--idp-base needs a URL") }
                configuration.idpBaseURL = value
            case "--oauth-user":
                guard let value = arguments.popFirst(), let colon = value.firstIndex(of: ":"), colon != value.startIndex,
                    value.index(after: colon) != value.endIndex
                else { usage("--oauth-user needs name:password") }
                oauthUsers = (oauthUsers ?? []) + [
                    SimulatorUser(username: String(value[..<colon]), password: String(value[value.index(after: colon)...]))
                ]
            case "--oauth-issuer":
                guard let value = arguments.popFirst() else { usage("--oauth-issuer needs a URL") }
                configuration.oauthIssuer = value
            case "--access-token-seconds":
                guard let value = arguments.popFirst(), let seconds = Int(value), (1...86_400).contains(seconds) else {
                    usage("--access-token-seconds needs a number in 1...86400")
                }
                configuration.accessTokenLifetime = .seconds(seconds)
            case "-h", "--help":
                usage(nil)
            default:
                usage("unknown argument \(argument)")
            }
        }

        if let oauthUsers { configuration.oauthUsers = oauthUsers }
        var logger = Logger(label: "upstream-simulator")
        logger.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .notice
        let state = SimulatorState()
        let app = buildSimulator(configuration: configuration, state: state, host: host, port: port, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await runSimulator(app, state: state, stopOnSignals: true)
            }
            if let bound = await state.boundPort() {
                // One line, written straight to fd 1 so it is never stuck in a buffer.
                FileHandle.standardOutput.write(Data("upstream-simulator listening on http://\(host):\(bound)\n".utf8))
            }
            try await group.waitForAll()
        }
    }

    static func usage(_ problem: String?) -> Never {
        if let problem { FileHandle.standardError.write(Data("upstream-simulator: \(problem)\n".utf8)) }
        print(
            """
            usage: upstream-simulator [--host H] [--port P]
                                      [--saml-binding postForm|redirect] [--no-identifying-header]
                                      [--otp off|afterSAML] [--acs-url URL]... [--idp-base URL]
                                      [--cookie-scope mount|forwardedPrefix|forwardedPrefixSlash] [--cookie-domain]
                                      [--oauth-user NAME:PASSWORD]... [--oauth-issuer URL] [--access-token-seconds N]
              --acs-url       an ACS URL the mock IdP accepts (repeatable; POST /control/saml/acs at run time)
              --idp-base      where browsers reach the IdP (default http://127.0.0.1:<port>)
              --cookie-scope  the Path of the /sp and /basic-otp session cookies: mount (/sp, the default),
                              or the proxy's X-Forwarded-Prefix (/web/sp), or that with a trailing /
              --cookie-domain add Domain=<X-Forwarded-Host without port> to those cookies behind a proxy
              --oauth-user    a user of the OAuth2 authorization server besides alice (repeatable; replaces
                              the default second user, bob:builder)
              --oauth-issuer  the issuer of its id_tokens (default http://127.0.0.1:<port>)
              --access-token-seconds  how long its access tokens live (default 3600; the soak uses short ones)
            """)
        exit(problem == nil ? 0 : 64)
    }
}
