import Foundation
import ParleyDomain
@testable import ParleyServer
import Testing

/// `PARLEY_WEB_PUBLIC_URL`: read like `PARLEY_PUBLIC_URL`, and refused at start (exit 78, with
/// every other problem) when it is not an origin of its own.
@Suite struct WebOriginConfigurationTests {
    static func read(_ web: String?, publicURL: String = "https://parley.example") throws -> ParleyConfiguration {
        try ConfigurationTests.withDestinations { path in
            var environment = ConfigurationTests.required(path)
            environment["PARLEY_PUBLIC_URL"] = publicURL
            if let web { environment["PARLEY_WEB_PUBLIC_URL"] = web }
            return try ParleyConfiguration.fromEnvironment(environment)
        }
    }

    @Test func webPublicURLIsRead() throws {
        #expect(try Self.read(nil).server.webPublicURL == nil)
        #expect(try Self.read("https://web.parley.example/").server.webPublicURL == "https://web.parley.example")
        #expect(try Self.read("https://web.parley.example/pfx").server.webPublicURL == "https://web.parley.example/pfx")
    }

    @Test(arguments: [
        "web.parley.example", "ftp://web.parley.example", "https://web.parley.example/?a=1", "https://web.parley.example/#top",
        "https://parley.example:8443", "https://PARLEY.example/web",
    ])
    func webPublicURLIsChecked(web: String) throws {
        let error = try #require(throws: ParleyConfiguration.Invalid.self) { try Self.read(web) }
        #expect(error.problems.count == 1, "\(error.problems)")
        #expect(error.problems.first?.hasPrefix("PARLEY_WEB_PUBLIC_URL must ") == true, "\(error.problems)")
    }
}
