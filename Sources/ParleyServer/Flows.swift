import AuthFlows
import Conversation
import Foundation
import Hummingbird
import Logging
import ParleyCrypto

/// Interactive flows: creation, the thin client's view, long-polls, and completion.
extension Parley {
    static let flowLifetime: TimeInterval = 600

    /// Creates a pending flow and returns it with its URL (the only time the caller sees the secret).
    func createFlow(
        for registration: RegistrationRecord, kind: InteractionRequest.Kind, purpose: String = "login", scopeKey: String?
    ) async throws -> (FlowRecord, String) {
        let id = UUID()
        let secret = SecureRandom.token(byteCount: 32)
        let now = clock.now
        let flow = try await flows.insert(
            id: id, registrationID: registration.id, kind: kind.rawValue, purpose: purpose, secretHash: SHA256.hash(Array(secret.utf8)),
            secretSealed: configuration.keyRing.seal(secret, associatedData: "flows.secret:\(id.uuidString.lowercased())"),
            scopeKey: scopeKey, returnUrl: registration.returnUrl, expiresAt: now.addingTimeInterval(Self.flowLifetime), now: now)
        await audit.record(
            "flow.created", actor: .system, registrationID: registration.id, destination: registration.destination,
            detail: ["kind": kind.rawValue, "flow": flow.idString, "purpose": purpose])
        return (flow, flowURL(flow, secret: secret))
    }

    func flowURL(_ flow: FlowRecord, secret: String) -> String {
        configuration.publicURL + "/flows/" + flow.idString + "?k=" + secret
    }

    /// The flow's URL for its owner (the secret is kept sealed for this).
    func flowURL(_ flow: FlowRecord) -> String? {
        guard let sealed = flow.secretSealed,
            let secret = try? configuration.keyRing.openString(sealed, associatedData: "flows.secret:\(flow.idString)")
        else { return nil }
        return flowURL(flow, secret: secret)
    }

    func flowJSON(_ flow: FlowRecord, url: String? = nil) -> JSONValue {
        .object([
            "id": .string(flow.idString),
            "kind": .string(flow.kind),
            "status": .string(flow.status),
            "url": .optional(url ?? flowURL(flow)),
            "expiresAt": .string(RFC3339.format(flow.expiresAt)),
            "error": flow.status == "failed" ? .string(flow.error ?? "failed") : .null,
        ])
    }

    /// The flow, with a pending one past its expiry turned `expired` first.
    func currentFlow(_ id: UUID) async throws -> FlowRecord? {
        guard var flow = try await flows.find(id: id) else { return nil }
        if flow.status == "pending" && flow.expiresAt <= clock.now {
            _ = try await flows.finish(id: id, status: "expired", error: nil, now: clock.now)
            flow = try await flows.find(id: id) ?? flow
        }
        return flow
    }

    /// The `401 interaction_required` answer: a new flow, in the body and in `Parley-Flow`.
    func interactionRequired(_ interaction: InteractionRequest, registration: RegistrationRecord) async throws -> Problem {
        let (flow, url) = try await createFlow(for: registration, kind: interaction.kind, scopeKey: interaction.scopeKey)
        var problem = Problem(.unauthorized, .interactionRequired, "a person must sign in (\(interaction.kind.rawValue)); open the flow URL")
        problem.headers[.init("Parley-Flow")!] = url
        problem.extra["flow"] = flowJSON(flow, url: url)
        return problem
    }

    /// `POST /v1/flows`: proactive login. Without `kind`, the destination's first
    /// interactive method among saml2, oauth2 (authorization code) and basic (form).
    func startFlow(kind requested: String?, registration: RegistrationRecord) async throws -> JSONValue {
        guard let destination = configuration.destinations[registration.destination] else {
            throw Problem.invalid("the registration's destination is no longer configured")
        }
        let offered = interactiveKinds(destination)
        let kind: InteractionRequest.Kind
        if let requested {
            guard let k = InteractionRequest.Kind(rawValue: requested), offered.contains(k) else {
                throw Problem.invalid("this destination offers no '\(requested.prefix(32))' flow")
            }
            kind = k
        } else {
            guard let first = offered.first else { throw Problem.invalid("this destination has no interactive login") }
            kind = first
        }
        let scopeKey = kind == .oauth2 ? (try? OAuth2Settings(destination: destination))?.defaultScopeKey : nil
        let (flow, url) = try await createFlow(for: registration, kind: kind, scopeKey: scopeKey)
        return flowJSON(flow, url: url)
    }

    /// Kinds of flow this build can run for a destination, in the contract's order.
    func interactiveKinds(_ destination: Destination) -> [InteractionRequest.Kind] {
        var kinds: [InteractionRequest.Kind] = []
        if let settings = try? OAuth2Settings(destination: destination), settings.grant == .authorizationCode { kinds.append(.oauth2) }
        return kinds
    }

    /// `GET /v1/flows/{id}?wait=S`: the registration's own flow only; waits (at most 60 s)
    /// for it to leave `pending`, woken by LISTEN/NOTIFY from any instance.
    func flowStatus(id: String, wait: String?, registration: RegistrationRecord) async throws -> JSONValue {
        guard let uuid = UUID(uuidString: id), var flow = try await currentFlow(uuid), flow.registrationID == registration.id else {
            throw Problem.notFound("no such flow")
        }
        let seconds = min(60, max(0, wait.flatMap(Double.init) ?? 0))
        if flow.status == "pending" && seconds > 0 {
            let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
            while flow.status == "pending" {
                let left = deadline - ContinuousClock.now
                guard left > .zero else { break }
                let untilExpiry = Duration.milliseconds(Int64(max(0, flow.expiresAt.timeIntervalSince(clock.now)) * 1000) + 10)
                await flowNotifications.wait(for: flow.idString, timeout: min(left, untilExpiry))
                try Task.checkCancellation()
                flow = try await currentFlow(uuid) ?? flow
            }
        }
        return flowJSON(flow)
    }

    /// A flow reached its end: wake waiters (the repository notifies), audit, and
    /// finish what waited on it (an SMP registration that needed a login).
    func flowFinished(_ flow: FlowRecord, status: String, error: String?, logger: Logger) async throws {
        guard try await flows.finish(id: flow.id, status: status, error: error, now: clock.now) else { return }
        await audit.record(
            "flow.\(status)", actor: .system, registrationID: flow.registrationID, detail: ["flow": flow.idString, "kind": flow.kind])
        logger.info("flow finished", metadata: ["flow.id": .string(flow.idString), "flow.status": .string(status)])
        if status == "completed", flow.purpose == "smp_registration", let registration = try await registrations.find(id: flow.registrationID) {
            await completeSMPRegistration(registration, logger: logger)
        }
    }
}
