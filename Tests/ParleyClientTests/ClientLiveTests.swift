import Foundation
import Logging
import ParleyClient
import ParleyTesting
import Testing
import UpstreamSimulator

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ParleyClient against the real `parley` binary, real PostgreSQL and the simulator: register,
/// a proxied GET, a streamed upload and download; `interaction_required` answered by a presenter
/// that drives headless Chromium through Parley's confirmation page and a sign-in (Parley's Basic
/// form, OAuth2 authorization code, SAML2 through the web path), the waiting call answered 200;
/// a revoked registration and a rate limit surface as their typed errors.
@Suite(.serialized) struct ClientLiveTests {
    static let keys = "k1:" + Data(repeating: 5, count: 32).base64EncodedString()
    static let adminToken = "client-admin-" + String(repeating: "y", count: 40)
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func destinations(_ sim: String) -> String {
        """
        destinations:
          - { name: sim, url: "\(sim)", basic: {} }
          - { name: form, url: "\(sim)", basic: { form: true } }
          - name: as
            url: "\(sim)"
            oauth2:
              grant: authorization_code
              authorizationEndpoint: "\(sim)/oauth/authorize"
              tokenEndpoint: "\(sim)/oauth/token"
              clientId: parley-public
              issuer: "\(sim)"
              jwksUri: "\(sim)/oauth/jwks"
          - { name: saml, url: "\(sim)/sp", saml2: {} }
        """
    }

    static func withParley(
        environment extra: [String: String] = [:], _ body: (_ parley: URL, _ simulator: SimulatorState, _ simulatorURL: String) async throws -> Void
    ) async throws {
        let postgres = try await PostgresServer.shared()
        let database = try await postgres.createDatabase()
        let port = try FreePort.find()
        let configuration = SimulatorConfiguration(samlACSURLs: ["http://127.0.0.1:\(port)/web/saml/saml/acs"])
        try await withRunningSimulator(configuration: configuration, logger: quiet) { simulatorPort, simulator in
            let sim = "http://127.0.0.1:\(simulatorPort)"
            let parley = try await ParleyProcess.start(
                environment: [
                    "PARLEY_DATABASE_URL": database, "PARLEY_ENCRYPTION_KEYS": Self.keys,
                    "PARLEY_DESTINATIONS": try ScratchFile.write(Self.destinations(sim), suffix: ".yaml"), "PARLEY_ADMIN_TOKENS": Self.adminToken,
                ].merging(extra) { $1 }, port: port)
            do {
                try await body(URL(string: "http://127.0.0.1:\(port)")!, simulator, sim)
            } catch {
                await parley.stop()
                throw error
            }
            await parley.stop()
        }
    }

    /// A presenter that is a person in a browser: opens the flow, presses the confirmation
    /// page's button, and signs in as alice where the page asks.
    static func browserPresenter(_ browser: WebDriverSession, simulator: String) -> ClosureSignInPresenter {
        ClosureSignInPresenter { flow in
            let url = try #require(flow.url)
            try await browser.openFlow(url.absoluteString)
            switch flow.kind {
            case "basic":
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "form button[type=submit]"))
            default:
                // The authorization server's or the identity provider's login page.
                _ = try await browser.waitForURL(prefix: simulator, timeout: .seconds(20))
                try await browser.sendKeys("alice", to: try await browser.findElement(css: "#username"))
                try await browser.sendKeys("wonderland", to: try await browser.findElement(css: "#password"))
                try await browser.click(try await browser.findElement(css: "#login"))
            }
            // The person is done when the browser reaches the flow's done page.
            let done = url.absoluteString.prefix { $0 != "?" } + "/done"
            _ = try await browser.waitForURL(prefix: String(done), timeout: .seconds(20))
        }
    }

    @Test func registersCallsAndStreamsBothWays() async throws {
        try await Self.withParley { parley, simulator, _ in
            let storage = MemoryTokenStorage()
            let sim = ParleyConversation(parleyURL: parley, destination: "sim", storage: storage)
            #expect(await !sim.isRegistered)
            await #expect(throws: ParleyError.notRegistered) { _ = try await sim.send(URLRequest(url: await sim.url("api/data"))) }
            let registration = try await sim.register(
                RegistrationRequest(deviceType: "iPhone", deviceModel: "iPhone15,3", credentials: .init(username: "alice", password: "wonderland")))
            #expect(registration.status == "active" && registration.destination == "sim" && registration.deviceModel == "iPhone15,3")
            #expect(await sim.isRegistered)

            let (data, response) = try await sim.send(URLRequest(url: await sim.url("api/data")))
            #expect(response.statusCode == 200)
            let answer = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect(answer["user"] as? String == "alice", "\(answer)")

            // 3 MiB up from a file, through a Basic challenge the conversation answers (the body is
            // sent again), and 2 MiB down into a file.
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("client-upload-" + UUID().uuidString)
            let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            try bytes.write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            var put = URLRequest(url: await sim.url("secure/upload"))
            put.httpMethod = "PUT"
            put.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
            let (uploaded, uploadResponse) = try await sim.upload(put, fromFile: file)
            #expect(uploadResponse.statusCode == 200)
            let digest = try #require(try JSONSerialization.jsonObject(with: uploaded) as? [String: Any])
            #expect(digest["bytes"] as? Int == bytes.count, "\(digest)")
            #expect(simulator.smp.secureUploadSuccesses == 1)

            let (downloaded, downloadResponse) = try await sim.download(URLRequest(url: await sim.url("files/big?mb=2")))
            defer { try? FileManager.default.removeItem(at: downloaded) }
            #expect(downloadResponse.statusCode == 200)
            let size = try FileManager.default.attributesOfItem(atPath: downloaded.path)[.size] as? Int
            #expect(size == 2 << 20)

            // An administrator deletes the registration: its token is refused, as a typed error.
            #expect(try await sim.registration().status == "active")
            var delete = URLRequest(url: parley.appendingPathComponent("admin/v1/registrations/" + registration.id))
            delete.httpMethod = "DELETE"
            delete.setValue("Bearer " + Self.adminToken, forHTTPHeaderField: "Authorization")
            let (_, deleted) = try await URLSession.shared.data(for: delete)
            #expect((deleted as? HTTPURLResponse)?.statusCode == 204)
            do {
                _ = try await sim.send(URLRequest(url: await sim.url("api/data")))
                Issue.record("a deleted registration's call went through")
            } catch let error as ParleyError {
                guard case .invalidClientToken(let detail) = error else { throw error }
                #expect(detail.contains("client token"), "\(detail)")
            }
        }
    }

    @Test func aRateLimitIsATypedErrorWithItsRetryAfter() async throws {
        try await Self.withParley(environment: ["PARLEY_RATE_LIMIT_PROXY": "2/60"]) { parley, _, _ in
            let sim = ParleyConversation(parleyURL: parley, destination: "sim")
            try await sim.register(RegistrationRequest(credentials: .init(username: "alice", password: "wonderland")))
            for _ in 0..<2 { #expect(try await sim.send(URLRequest(url: await sim.url("api/data"))).1.statusCode == 200) }
            do {
                _ = try await sim.send(URLRequest(url: await sim.url("api/data")))
                Issue.record("the third call within the minute went through")
            } catch let error as ParleyError {
                guard case .rateLimited(let retryAfter, let detail) = error else { throw error }
                #expect((retryAfter ?? .zero) > .zero && detail.contains("too many"), "\(error)")
            }
        }
    }

    @Test(arguments: ["form", "as", "saml"])
    func aSignInIsPresentedAndTheWaitingCallAnswers(destination: String) async throws {
        try await Self.withParley { parley, _, sim in
            try await ChromeDriver.withSession { browser in
                let presenter = Self.browserPresenter(browser, simulator: sim)
                let conversation = ParleyConversation(parleyURL: parley, destination: destination, presenter: presenter)
                try await conversation.register(RegistrationRequest(deviceType: "test"))
                let path = destination == "as" ? "oauth-api/orders" : "api/data"
                let (data, response) = try await conversation.send(URLRequest(url: await conversation.url(path)))
                #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
                #expect(String(decoding: data, as: UTF8.self).contains("alice"))
            }
            // Without a presenter the call is the typed error, with the flow to open.
            let bare = ParleyConversation(parleyURL: parley, destination: destination)
            try await bare.register()
            do {
                _ = try await bare.send(URLRequest(url: await bare.url(destination == "as" ? "oauth-api/orders" : "api/data")))
                Issue.record("a call that needs a person went through")
            } catch let error as ParleyError {
                guard case .interactionRequired(let flow, _) = error else { throw error }
                #expect(flow.isPending && flow.url?.absoluteString.hasPrefix(parley.absoluteString + "/flows/") == true)
            }
        }
    }
}
