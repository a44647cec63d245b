import AuthFlows
import Conversation
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ParleyDomain
@testable import ParleyServer
import ParleyTesting
import Testing

/// A throwaway flow kind, written as a new kind is written: this one file, plus the one
/// line that registers it (`additionalFlowKinds` below stands for the line in `compose`).
/// It proves the seam: nothing in `Conversation`, the schema, `FlowRecord`,
/// `FlowRepository` or the controllers names it, yet it is offered, started, keeps sealed
/// state of its own between pages, serves its own route and finishes like every kind.
///
/// "Consent": the start page asks the person to confirm (and counts how often it was
/// shown); posting the confirmation completes the flow.
struct ConsentFlow: FlowKindHandler {
    static let name = FlowKind(rawValue: "consent")

    /// The kind's own state, sealed in the flow row.
    struct State: Codable, Sendable { var pageViews: Int }

    let kind = ConsentFlow.name
    let flows: FlowService
    let state: FlowKindState<State>

    init(_ environment: FlowKindEnvironment) {
        flows = environment.flows
        state = environment.state(State.self)
    }

    func isOffered(by destination: Destination) -> Bool { destination.name == "form" }

    func scopeKey(for destination: Destination) -> String? { nil }

    func start(_ flow: FlowRecord, secret: String, registration: RegistrationRecord, destination: Destination) async throws -> FlowPage {
        var views = 0
        guard try await state.update(flow, { current in
            views = (current?.pageViews ?? 0) + 1
            current = State(pageViews: views)
        }) != nil else { return flows.done(flow) }
        return .message(.ok, title: "Confirm", message: "Confirm to continue.", attributes: ["data-consent-views": "\(views)"])
    }

    func routes(_ kinds: FlowKinds) -> [FlowRoute] {
        [
            FlowRoute(path: "/flows/{id}/consent", methods: [.post], sameOriginForm: true) { input, logger in
                switch try await flows.browserAccess(id: input.id, secret: input.value("k")) {
                case .pending(let flow) where flow.kind == ConsentFlow.name:
                    try await flows.finish(flow, status: .completed, error: nil, logger: logger)
                    return flows.done(flow)
                case .pending:
                    return .failure(Problem.notFound("no such consent"))
                case .answered(let page):
                    return page
                }
            }
        ]
    }
}

@Suite struct ThrowawayFlowKindTests {
    /// A kind registered twice stops the start: which handler answers its pages is never left to
    /// the order of the lines in `compose`.
    @Test func aKindRegisteredTwiceIsAStartUpError() throws {
        #expect(throws: CompositionError.duplicateFlowKind("otp")) {
            _ = try compose(
                configuration: try HostedFlowRouterTests.configuration(), dependencies: .inMemory(), metrics: Metrics(), logger: quietLogger,
                additionalFlowKinds: [{ OTPFlow($0) }])
        }
        #expect(CompositionError.duplicateFlowKind("otp").description == "the flow kind 'otp' is registered twice")
    }

    @Test func aNewKindIsOneFilePlusOneLine() async throws {
        let flows = InMemoryFlows()
        var dependencies = ParleyDependencies.inMemory(transport: FakeTransport { _ in .text(404) })
        dependencies.flows = flows
        let router = try compose(
            configuration: try HostedFlowRouterTests.configuration(), dependencies: dependencies, metrics: Metrics(), logger: quietLogger,
            additionalFlowKinds: [{ ConsentFlow($0) }]
        ).router
        try await Application(router: router).test(.router) { client in
            let token = try await HostedFlowRouterTests.register(client, "form")
            let auth: HTTPFields = [.authorization: "Bearer \(token)", .contentType: "application/json"]

            // Registered after the built-in kinds: without `kind` the form still comes first;
            // asked for by name it is offered, and only where it says so.
            let preferred = try await client.execute(uri: "/v1/flows", method: .post, headers: auth, body: ByteBuffer(string: "{}")) {
                RouterTests.json($0.body)["kind"] as? String
            }
            #expect(preferred == "basic")
            let (id, path) = try await client.execute(
                uri: "/v1/flows", method: .post, headers: auth, body: ByteBuffer(string: "{\"kind\":\"consent\"}")
            ) { response -> (String, String) in
                #expect(response.status == .created)
                let flow = RouterTests.json(response.body)
                #expect(flow["kind"] as? String == "consent")
                #expect(flow["status"] as? String == "pending")
                return (flow["id"] as? String ?? "", String((flow["url"] as? String ?? "").dropFirst("https://parley.example".count)))
            }
            let other = try await HostedFlowRouterTests.register(client, "sp")
            try await client.execute(
                uri: "/v1/flows", method: .post, headers: [.authorization: "Bearer \(other)"], body: ByteBuffer(string: "{\"kind\":\"consent\"}")
            ) { RouterTests.expectProblem($0, .badRequest, "invalid_request") }

            // The start page keeps the kind's own state between openings, sealed in the row.
            for expected in 1...2 {
                try await FlowConfirmationRouterTests.confirm(client, path) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body).contains("data-consent-views=\"\(expected)\""))
                }
            }
            let stored = try #require(flows.all.first { $0.idString == id }?.kindState)
            #expect(!String(decoding: stored, as: UTF8.self).contains("pageViews"), "the kind's state is sealed")

            // Its own route finishes it like any kind: the done page, the thin client's view.
            let secret = path.split(separator: "=").last.map(String.init) ?? ""
            try await client.execute(uri: "/flows/\(id)/consent?k=wrong", method: .post) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/flows/\(id)/consent?k=\(secret)", method: .post) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "https://parley.example/flows/\(id)/done")
            }
            try await client.execute(uri: "/v1/flows/\(id)", method: .get, headers: auth) { response in
                #expect(RouterTests.json(response.body)["status"] as? String == "completed")
            }
            #expect(flows.all.first { $0.idString == id }?.kindState == nil, "a finished flow keeps no kind state")
        }
    }
}
