package import AuthFlows
package import Conversation
package import Foundation
package import Logging
import ParleyCrypto
import Tracing

/// Something that waits on flows of one purpose and acts when one completes
/// (an SMP registration that needed a login registers upstream then).
package protocol FlowCompletion: Sendable {
    /// `lifecycle`: the flows, for a completion that needs a person once more (a second factor).
    func flowCompleted(_ flow: FlowRecord, lifecycle: FlowService, logger: Logger) async
}

/// The life of every flow, whatever its kind: creation with an unguessable URL,
/// the thin client's view and long-poll, expiry, and finishing exactly once.
/// What a kind does in the browser lives in `FlowKinds/`.
package struct FlowService: Sendable {
    package static var lifetime: TimeInterval { FlowStarter.lifetime }

    /// Creation, the flow object, and a registration's pending flow: what starts flows.
    package let starter: FlowStarter
    package let signals: any FlowSignals
    /// What to do when a flow of a purpose completes.
    package let completions: [FlowPurpose: any FlowCompletion]
    /// Where a hosted flow's cookies wait for its completion.
    package let staging: CookieStaging
    /// Whether a flow's sign-in is the registration's user.
    package let binding: IdentityBinding
    package let metrics: Metrics?

    package var flows: any FlowRepository { starter.flows }
    package var secrets: Secrets { starter.secrets }
    package var audit: AuditLog { starter.audit }
    package var clock: any WallClock { starter.clock }
    package var publicURL: String { starter.publicURL }

    /// A kind learned who signed in: the flow may go on when it is the registration's user (or
    /// binds a registration that had none); otherwise it ends failed with `identity_mismatch`
    /// and nothing it produced reaches the registration. True when the flow may complete.
    package func admit(_ flow: FlowRecord, signedIn: SignedInIdentity, logger: Logger) async throws -> Bool {
        switch try await binding.judge(flow, signedIn: signedIn, logger: logger) {
        case .admitted:
            return true
        case .mismatch:
            try await finish(flow, status: .failed, error: IdentityBinding.mismatch, logger: logger)
            return false
        }
    }

    /// A kind's sign-in ended without saying who signed in. A flow whose registration has a user,
    /// or whose destination requires one, cannot be judged: it ends failed with
    /// `identity_unknown` and keeps nothing. True when the flow may complete all the same (an
    /// optional destination's registration without a user).
    package func admitUnknown(_ flow: FlowRecord, logger: Logger) async throws -> Bool {
        guard try await binding.needsIdentity(flow) else { return true }
        logger.warning(
            "a sign-in did not say who signed in, and its registration has a user (or its destination requires one); nothing of it is kept",
            metadata: ["flow.id": .string(flow.idString), "flow.kind": .string(flow.kind.rawValue)])
        try await finish(flow, status: .failed, error: IdentityBinding.unknown, logger: logger)
        return false
    }

    /// Creates a pending flow and returns it with its URL (the only time the caller sees the secret).
    package func create(
        for registration: RegistrationRecord, kind: FlowKind, purpose: FlowPurpose = .login, scopeKey: String?,
        challengeURL: String? = nil
    ) async throws -> (FlowRecord, String) {
        try await starter.create(for: registration, kind: kind, purpose: purpose, scopeKey: scopeKey, challengeURL: challengeURL)
    }

    package func url(_ flow: FlowRecord, secret: String) -> String { starter.url(flow, secret: secret) }

    /// The flow's URL for its owner (the secret is kept sealed for this).
    package func url(_ flow: FlowRecord) -> String? { starter.url(flow) }

    /// Where every flow page ends.
    package func doneURL(_ flow: FlowRecord) -> String { starter.doneURL(flow) }

    /// The contract's flow object (`url` with the secret only for the flow's owner).
    package func view(_ flow: FlowRecord, url: String? = nil) -> FlowView { starter.view(flow, url: url) }

    /// The flow, with a pending one past its expiry turned `expired` first.
    package func current(_ id: UUID) async throws -> FlowRecord? {
        guard var flow = try await flows.find(id: id) else { return nil }
        if flow.status == .pending && flow.expiresAt <= clock.now {
            if try await flows.finish(id: id, status: .expired, error: nil, at: clock.now) {
                metrics?.increment(.flows, [("kind", flow.kind.rawValue), ("outcome", FlowStatus.expired.rawValue)])
                try await signals.announce(flowID: id)
            }
            flow = try await flows.find(id: id) ?? flow
        }
        return flow
    }

    /// What a browser page may do with a flow it names by id and secret.
    package enum BrowserAccess {
        /// The secret checked out (in constant time) and the flow is pending.
        case pending(FlowRecord)
        /// The page to show instead: not found, expired, or the done page of a finished flow.
        case answered(FlowPage)
    }

    /// The flow a browser page names, if its secret is right and it is still pending.
    package func browserAccess(id: String?, secret: String?) async throws -> BrowserAccess {
        guard let id = id.flatMap(UUID.init(uuidString:)), let secret, let flow = try await current(id),
            flow.isOpened(by: secret)
        else { return .answered(.notice(.linkNotValid)) }
        switch flow.status {
        case .pending: return .pending(flow)
        case .expired: return .answered(.notice(.expired, age: PageAge(since: flow.createdAt, now: clock.now)))
        case .completed, .failed: return .answered(done(flow))
        }
    }

    /// Onward to the page every flow ends at.
    package func done(_ flow: FlowRecord) -> FlowPage { .redirect(doneURL(flow)) }

    /// The `401 interaction_required` answer: the registration's pending login flow of the same
    /// kind and scope key when there is one (with at least `reuseMargin` left), else a new flow;
    /// in the body and in `Parley-Flow`. A client retrying a challenged call does not pile up flows.
    package func interactionRequired(_ interaction: InteractionRequest, registration: RegistrationRecord) async throws -> InteractionRequired {
        try await interactionRequired(
            kind: interaction.kind, scopeKey: interaction.scopeKey, challengeURL: interaction.url, purpose: .login, registration: registration,
            detail: "a person must sign in (\(interaction.kind.rawValue)); open the flow URL")
    }

    /// The answer to a call a `stepUp` rule covers while the registration's last sign-in is
    /// older than the rule allows: a `step_up` flow (a fresh sign-in, `prompt=login` for OAuth2).
    package func stepUpRequired(kind: FlowKind, scopeKey: String?, rule: StepUpRule, registration: RegistrationRecord) async throws -> InteractionRequired {
        let seconds = rule.maxAge.components.seconds
        return try await interactionRequired(
            kind: kind, scopeKey: scopeKey, challengeURL: nil, purpose: .stepUp, registration: registration,
            detail: "this call needs a sign-in at most \(seconds) s old (\(kind.rawValue)); open the flow URL, then call again")
    }

    /// The pending login flow a challenge asks the person to complete (reused, as for its `401`).
    package func pendingFlow(for interaction: InteractionRequest, registration: RegistrationRecord) async throws -> FlowRecord {
        try await pendingFlow(
            kind: interaction.kind, scopeKey: interaction.scopeKey, challengeURL: interaction.url, purpose: .login, registration: registration
        ).flow
    }

    private func interactionRequired(
        kind: FlowKind, scopeKey: String?, challengeURL: String?, purpose: FlowPurpose, registration: RegistrationRecord, detail: String
    ) async throws -> InteractionRequired {
        let (flow, url) = try await pendingFlow(
            kind: kind, scopeKey: scopeKey, challengeURL: challengeURL, purpose: purpose, registration: registration)
        return InteractionRequired(detail: detail, flow: view(flow, url: url))
    }

    /// The registration's pending flow of this kind, scope key and purpose with at least
    /// `FlowStarter.reuseMargin` left, else a new one.
    package func pendingFlow(
        kind: FlowKind, scopeKey: String?, challengeURL: String?, purpose: FlowPurpose, registration: RegistrationRecord
    ) async throws -> (flow: FlowRecord, url: String) {
        try await starter.pendingFlow(kind: kind, scopeKey: scopeKey, challengeURL: challengeURL, purpose: purpose, registration: registration)
    }

    /// The registration's own flow only; waits (at most 60 s) for it to leave `pending`,
    /// woken by the flow signals from any instance.
    /// `wait` is in seconds, clamped to `0...LongPoll.maxSeconds`.
    package func status(id: UUID?, wait requested: Double, registration: RegistrationRecord) async throws -> FlowView {
        guard let uuid = id, var flow = try await current(uuid), flow.registrationID == registration.id else {
            throw FlowError.notFound
        }
        let seconds = requested.isFinite ? min(LongPoll.maxSeconds, max(0, requested)) : 0
        if flow.status == .pending && seconds > 0 {
            let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
            while flow.status == .pending {
                let left = deadline - ContinuousClock.now
                guard left > .zero else { break }
                let untilExpiry = max(0, min(Self.lifetime, flow.expiresAt.timeIntervalSince(clock.now)))
                let goOn = await signals.wait(for: flow.id, timeout: min(left, .milliseconds(Int64(untilExpiry * 1000) + 10)))
                try Task.checkCancellation()
                flow = try await current(uuid) ?? flow
                // Shutting down: answer with the state as it is; the client polls again elsewhere.
                guard goOn else { break }
            }
        }
        return view(flow)
    }

    /// A flow reached its end: wake waiters, audit, and finish what waited on it.
    package func finish(_ flow: FlowRecord, status: FlowStatus, error: String?, logger: Logger) async throws {
        let span = startSpan("flow finish")
        defer { span.end() }
        if span.isRecording { span.updateAttributes { $0["parley.flow.kind"] = flow.kind.rawValue; $0["parley.flow.status"] = status.rawValue } }
        guard let action = AuditAction(flowFinished: status) else { return }
        // A completed flow's staged cookies join the registration's jar before the flow is
        // marked completed (a woken long-poll finds them); any other end drops them.
        if status == .completed, let current = try await flows.find(id: flow.id), current.status == .pending {
            try await staging.commit(current)
        }
        // The event is written by the same statement that ends the flow (the outbox).
        var event: LifecycleEvent?
        switch status {
        case .completed: event = LifecycleEvent(.flowCompleted, detail: flow.eventDetail)
        case .failed: event = LifecycleEvent(.flowFailed, detail: flow.eventDetail.merging(["reason": error ?? "failed"]) { a, _ in a })
        case .pending, .expired: event = nil
        }
        guard try await flows.finish(id: flow.id, status: status, error: error, at: clock.now, event: event) else { return }
        metrics?.increment(.flows, [("kind", flow.kind.rawValue), ("outcome", status.rawValue)])
        if status == .completed {
            // A person signed in just now: what step-up rules compare with.
            do {
                try await binding.registrations.setSignedIn(id: flow.registrationID, at: clock.now)
                // A registration that needed a person again has one: it is active by itself.
                if try await binding.registrations.changeStatus(
                    from: .reconnectRequired, to: .active, id: flow.registrationID, event: LifecycleEvent(.recovered, detail: ["flowId": flow.idString]))
                {
                    await audit.record(.registrationRecovered, actor: .system, registrationID: flow.registrationID, detail: ["flow": flow.idString])
                    await binding.invalidation(flow.registrationID)
                }
            } catch {
                logger.warning("the sign-in time was not recorded", metadata: ["flow.id": .string(flow.idString), "error": "\(error)"])
            }
        }
        await audit.record(
            action, actor: .system, registrationID: flow.registrationID, detail: ["flow": flow.idString, "kind": flow.kind.rawValue])
        logger.info("flow finished", metadata: ["flow.id": .string(flow.idString), "flow.status": .string(status.rawValue)])
        // What waited on the flow runs first, so a woken long-poll finds its effect done
        // (an SMP registration active with its APPCID).
        if status == .completed, let completion = completions[flow.purpose] {
            await completion.flowCompleted(flow, lifecycle: self, logger: logger)
        }
        try await signals.announce(flowID: flow.id)
    }

    package init(starter: FlowStarter, signals: any FlowSignals, completions: [FlowPurpose: any FlowCompletion], staging: CookieStaging, binding: IdentityBinding, metrics: Metrics? = nil) {
        self.starter = starter
        self.signals = signals
        self.completions = completions
        self.staging = staging
        self.binding = binding
        self.metrics = metrics
    }
}

extension FlowRecord {
    /// Whether `secret` is this flow's URL secret (only its hash is kept), compared in constant time:
    /// the one check of the start page, the hosted upstream's binding and the web hand-over.
    package func isOpened(by secret: String) -> Bool { constantTimeEquals(SHA256.hash(Array(secret.utf8)), secretHash) }

    /// What a flow's events say about it: its id, kind and purpose.
    package var eventDetail: [String: String] { ["flowId": idString, "kind": kind.rawValue, "purpose": purpose.rawValue] }
}

/// The contract's flow object, the same in a registration, a `401`, and `GET /v1/flows/{id}`:
/// every member present, `url` and `error` `null` when absent.
package struct FlowView: Encodable, Sendable, Equatable {
    package let id: String
    package let kind: String
    package let status: String
    @Nullable package var url: String?
    package let expiresAt: Date
    @Nullable package var error: String?

    package init(id: String, kind: String, status: String, url: String? = nil, expiresAt: Date, error: String? = nil) {
        self.id = id
        self.kind = kind
        self.status = status
        self.url = url
        self.expiresAt = expiresAt
        self.error = error
    }
}

package enum RFC3339 {
    package static func format(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: false, timeZone: .gmt))
    }
}

/// A call a person must act on first: the flow to open (`401 interaction_required`, with the
/// flow in the body and its URL in `Parley-Flow`, at the edge). An answer, not a failure.
package struct InteractionRequired: Error, Sendable {
    package let detail: String
    package let flow: FlowView

    package init(detail: String, flow: FlowView) {
        self.detail = detail
        self.flow = flow
    }
}

/// A flow the caller may not see: not there, or another registration's.
package enum FlowError: Error, Sendable, Equatable { case notFound }
