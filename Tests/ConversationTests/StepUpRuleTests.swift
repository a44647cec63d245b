import AuthFlows
import Testing

/// What a `stepUp` rule covers, and which rules a destinations file may hold.
@Suite struct StepUpRuleTests {
    static func destination(_ rules: [DestinationSpec.StepUp], basicForm: Bool = true) throws -> Destination {
        var spec = DestinationSpec(name: "pay", url: "https://pay.example")
        spec.basic = .init(form: basicForm)
        spec.stepUp = rules
        return try spec.validated()
    }

    @Test func aRuleCoversItsPathAtASegmentBoundaryWithoutCaseAndOnlyItsMethods() throws {
        let destination = try Self.destination([.init(methods: ["post", "DELETE"], pathPrefix: "/api/Pay", maxAgeSeconds: 60)])
        for (method, path, covered) in [
            ("POST", "/api/pay", true), ("POST", "/api/pay/1", true), ("POST", "/api/pay?x=1", true), ("POST", "/api/pay;jsessionid=1", true),
            ("DELETE", "/API/PAY/1", true), ("post", "/api/pay", true),
            ("GET", "/api/pay", false), ("HEAD", "/api/pay", false), ("POST", "/api/payroll", false), ("POST", "/api", false),
            ("POST", "/other/api/pay", false),
        ] {
            #expect((destination.stepUpRule(method: method, path: path) != nil) == covered, "\(method) \(path)")
        }
        let everyMethod = try Self.destination([.init(pathPrefix: "/admin/", maxAgeSeconds: 0)])
        #expect(everyMethod.stepUpRule(method: "GET", path: "/admin/users") != nil)
        #expect(everyMethod.stepUpRule(method: "GET", path: "/admin") == nil, "a prefix ending in / covers what is below it")
        #expect(everyMethod.stepUpRule(method: "GET", path: "/administrator") == nil)
    }

    @Test func badRulesAndDestinationsWithoutASignInAreConfigurationProblems() throws {
        #expect(throws: DestinationSpec.Invalid.self) { try Self.destination([.init(pathPrefix: "api", maxAgeSeconds: 60)]) }
        #expect(throws: DestinationSpec.Invalid.self) { try Self.destination([.init(pathPrefix: "/api", maxAgeSeconds: -1)]) }
        #expect(throws: DestinationSpec.Invalid.self) { try Self.destination([.init(pathPrefix: "/api", maxAgeSeconds: .nan)]) }
        #expect(throws: DestinationSpec.Invalid.self) { try Self.destination([.init(methods: ["PO ST"], pathPrefix: "/api", maxAgeSeconds: 1)]) }
        do {
            _ = try Self.destination([.init(pathPrefix: "/api", maxAgeSeconds: 60)], basicForm: false)
            Issue.record("a destination whose sign-ins no person does took a stepUp rule")
        } catch {
            #expect("\(error)".contains("stepUp needs a sign-in a person does"))
        }
    }
}
