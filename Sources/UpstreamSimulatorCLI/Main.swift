import Foundation
import Hummingbird
import HummingbirdTLS
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
        var tls = ClientCertificateListener.Options()
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
            case "--tls-port":
                guard let value = arguments.popFirst(), let number = Int(value), (0...65535).contains(number) else {
                    usage("--tls-port needs a number in 0...65535")
                }
                tls.port = number
            case "--tls-certificate", "--tls-key", "--tls-client-ca":
                guard let value = arguments.popFirst() else { usage("\(argument) needs a PEM file") }
                switch argument {
                case "--tls-certificate": tls.certificate = value
                case "--tls-key": tls.key = value
                default: tls.clientCA = value
                }
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
        let clientCertificateApp: ClientCertificateListener.App?
        do {
            clientCertificateApp = try ClientCertificateListener.build(tls, host: host, logger: logger)
        } catch {
            usage("\(error)")
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await runSimulator(app, state: state, stopOnSignals: true)
            }
            if let clientCertificateApp {
                // Also stops on SIGTERM/SIGINT, gracefully, beside the plain listener.
                group.addTask { try await clientCertificateApp.runService() }
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
                                      [--tls-port P --tls-certificate PEM --tls-key PEM --tls-client-ca PEM]
              --acs-url       an ACS URL the mock IdP accepts (repeatable; POST /control/saml/acs at run time)
              --idp-base      where browsers reach the IdP (default http://127.0.0.1:<port>)
              --cookie-scope  the Path of the /sp and /basic-otp session cookies: mount (/sp, the default),
                              or the proxy's X-Forwarded-Prefix (/web/sp), or that with a trailing /
              --cookie-domain add Domain=<X-Forwarded-Host without port> to those cookies behind a proxy
              --oauth-user    a user of the OAuth2 authorization server besides alice (repeatable; replaces
                              the default second user, bob:builder)
              --oauth-issuer  the issuer of its id_tokens (default http://127.0.0.1:<port>)
              --access-token-seconds  how long its access tokens live (default 3600; the soak uses short ones)
              --tls-port      also listen with TLS on this port, requiring a client certificate issued by
                              --tls-client-ca (the handshake fails without one); it serves GET /api/data:
                              {"message":"hello","via":"client-certificate"}. --tls-certificate and --tls-key
                              are the server's certificate (chain) and key
            """)
        exit(problem == nil ? 0 : 64)
    }
}

/// The `--tls-port` listener: HTTPS that requires a client certificate from one CA, for a destination
/// with `clientCertificate` (the demo's `demo-cert`). One route; the handshake itself is the check.
enum ClientCertificateListener {
    typealias App = Application<RouterResponder<BasicRequestContext>>

    struct Options {
        var port: Int?
        var certificate: String?
        var key: String?
        var clientCA: String?
    }

    struct Problem: Error, CustomStringConvertible {
        let description: String
    }

    /// nil without `--tls-port`; otherwise the listener, or a problem with the options or files.
    static func build(_ options: Options, host: String, logger: Logger) throws -> App? {
        guard let port = options.port else {
            guard options.certificate == nil, options.key == nil, options.clientCA == nil else {
                throw Problem(description: "--tls-certificate, --tls-key and --tls-client-ca need --tls-port")
            }
            return nil
        }
        guard let certificatePath = options.certificate, let keyPath = options.key, let caPath = options.clientCA else {
            throw Problem(description: "--tls-port needs --tls-certificate, --tls-key and --tls-client-ca")
        }
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem)))
        // A server that verifies asks for a client certificate and refuses a handshake without one.
        tls.certificateVerification = .noHostnameVerification
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caPath))
        let router = Router()
        router.get("/api/data") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"message":"hello","via":"client-certificate"}"#)))
        }
        return Application(
            router: router, server: try .tls(.http1(), tlsConfiguration: tls),
            configuration: .init(address: .hostname(host, port: port), serverName: "upstream-simulator"),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                FileHandle.standardOutput.write(
                    Data("upstream-simulator listening on https://\(host):\(bound) (client certificate required)\n".utf8))
            },
            logger: logger)
    }
}
