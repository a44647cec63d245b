import NIOPosix
package import AuthFlows
package import Conversation
import Foundation
package import Logging
package import ParleyCrypto
import ParleyEncoding
import Synchronization

/// `POST /v1/registrations` input. Unknown members are ignored; wrong types are refused.
package struct CreateRegistration: Decodable {
    package var destination: String
    package var deviceType: String?
    package var deviceModel: String?
    package var userHint: String?
    package var returnUrl: String?
    package var credentials: UserCredentials?
    package var clientCertificate: Certificate?
    /// An identity token (JWT) from a listed identity provider naming the registration's user.
    package var identityToken: String?
    /// A browser app's registration: its client token goes into a cookie, not the answer.
    package var browser: Bool?

    package struct Certificate: Decodable {
        package var pkcs12: String
        package var password: String?
    }
}

/// Why a registration was refused or cannot be found. Input that breaks a field rule is
/// `InvalidInput`; what the upstream refused is `SMPRegistrationError`.
package enum RegistrationError: Error, Sendable, Equatable {
    /// No destination of this name is configured.
    case unknownDestination(String)
    /// `returnUrl` is not allowed for the destination.
    case returnURLNotAllowed
    /// `clientCertificate.pkcs12` is not base64 of at most `maxBytes` bytes.
    case certificateNotBase64(maxBytes: Int)
    /// `clientCertificate.pkcs12` could not be imported.
    case certificateUnusable(ClientIdentity.ImportError)
    /// The destination's `enrolment` policy: the `Parley-Enrolment` secret was missing or wrong.
    case enrolmentSecretRefused
    /// The destination requires verified users (`registration: {identity: required}`) and no
    /// identity token came. A token that came and failed is an `IdentityTokenError`.
    case identityTokenRequired
    /// An identity token for a registration whose user no identity token verified.
    case identityNotVerified
    /// An identity token of somebody other than the registration's user.
    case identityOfAnotherUser
    /// Approval of a registration that is not `pending_approval`.
    case notPendingApproval
    /// No registration has this id.
    case notFound
    /// The client token names no registration (any longer): it was revoked or never issued.
    case clientTokenRefused
    /// The registration's destination is no longer configured.
    case destinationGone
    /// `"browser": true` without an `Origin` of a browser app that lists the destination.
    case browserOriginRefused
}

/// Registrations: created locally, then registered upstream when the destination has
/// SMP configured; torn down completely. Returns records and the flow a registration
/// waits on; the controllers shape them for the API.
package struct RegistrationService: Sendable {
    package let registrations: any RegistrationRepository
    package let tokens: any TokenRepository
    package let conversations: Conversations
    package let registrar: SMPRegistrar
    package let flows: FlowService
    package let secrets: Secrets
    package let invalidation: CacheInvalidation
    package let audit: AuditLog
    package let metrics: Metrics
    package let clock: any WallClock
    /// Checks `identityToken` against the destinations file's identity providers.
    package let identityTokens: IdentityTokenVerifier
    /// Revocations that stick: tokens issued before one are refused.
    package let notBefores: NotBefores
    /// The destinations file's browser apps (`browserApps`).
    package let browserApps: [BrowserApp]

    /// A registration after its upstream step: the record, and the login flow it waits on when `login_required`.
    package struct Proceeded: Sendable {
        package let record: RegistrationRecord
        package let flow: FlowView?
    }

    /// A new registration with its client token (shown this once).
    package struct Created: Sendable {
        package let record: RegistrationRecord
        package let clientToken: String
        package let flow: FlowView?
    }

    /// `enrolmentSecret`: the `Parley-Enrolment` header, for destinations whose policy asks for it.
    /// `origin`: the request's `Origin` header, which a browser app's registration (`browser`)
    /// must carry, one of an app's that lists the destination.
    package func register(_ input: CreateRegistration, enrolmentSecret: String?, origin: String? = nil, logger: Logger) async throws -> Created {
        guard let destination = conversations.destinations[input.destination] else {
            throw RegistrationError.unknownDestination(input.destination)
        }
        for (field, value) in [("deviceType", input.deviceType), ("deviceModel", input.deviceModel), ("userHint", input.userHint)] {
            _ = try InvalidInput.checkedPrintable(value, field)
        }
        var app: BrowserApp?
        if input.browser == true {
            guard let origin, let found = browserApps.first(where: { $0.destinations.contains(destination.name) && $0.allows(origin: origin) }) else {
                await audit.record(.registrationRefused, actor: .client, destination: destination.name, detail: ["browser": "origin_not_listed"])
                metrics.increment(.registrations, [("action", "refused")])
                throw RegistrationError.browserOriginRefused
            }
            app = found
        }
        if let returnUrl = try InvalidInput.checkedText(input.returnUrl, "returnUrl"),
            !(app.map { $0.allowsReturnURL(returnUrl) } ?? destination.allowsReturnURL(returnUrl))
        {
            throw RegistrationError.returnURLNotAllowed
        }
        if case .enrolment(let expected) = destination.registrationPolicy {
            let presented = SHA256.hash(Array((enrolmentSecret ?? "").utf8))
            guard let enrolmentSecret, !enrolmentSecret.isEmpty, enrolmentSecret.utf8.count <= 512, constantTimeEquals(presented, expected) else {
                await audit.record(
                    .registrationRefused, actor: .client, destination: destination.name,
                    detail: ["policy": "enrolment", "secret": enrolmentSecret == nil ? "missing" : "wrong"])
                metrics.increment(.registrations, [("action", "refused")])
                throw RegistrationError.enrolmentSecretRefused
            }
        }
        let verified = try await verifiedUser(input.identityToken, destination: destination, logger: logger)
        let user = verified?.user
        var certificate: ClientCertificateMaterial?
        if let c = input.clientCertificate {
            guard c.pkcs12.utf8.count <= 4 * ClientIdentity.maxPKCS12Bytes / 3 + 4, let bytes = Base64.decode(c.pkcs12), !bytes.isEmpty else {
                throw RegistrationError.certificateNotBase64(maxBytes: ClientIdentity.maxPKCS12Bytes)
            }
            // Checked and converted to PEM once, here, off the event loops, and only for a request
            // the destination's policy admitted; key derivation is bounded.
            metrics.increment(.registrations, [("action", "certificate_import")])
            let password = c.password
            let outcome = try await NIOThreadPool.singleton.runIfActive { () -> Result<ClientIdentity, ClientIdentity.ImportError> in
                do throws(ClientIdentity.ImportError) {
                    return .success(try ClientIdentity.importPKCS12(bytes, password: password))
                } catch {
                    return .failure(error)
                }
            }
            switch outcome {
            case .success(let identity): certificate = ClientCertificateMaterial(identity: identity)
            case .failure(let error): throw RegistrationError.certificateUnusable(error)
            }
        }

        let id = UUID()
        let token = SecretToken.generate(prefix: "pct_")
        let waits = destination.registrationPolicy == .approval
        let record = RegistrationRecord(
            id: id, destination: destination.name, status: waits ? .pendingApproval : .active, deviceType: input.deviceType, deviceModel: input.deviceModel,
            userHint: input.userHint, returnUrl: input.returnUrl,
            credentialsSealed: try input.credentials.map { try secrets.seal(credentials: $0, id: id) },
            clientCertificateSealed: try certificate.map { try secrets.seal(certificate: $0, id: id) }, createdAt: clock.now, user: user,
            identityTokenSealed: try propagatedIdentity(verified, input.identityToken, destination: destination).map {
                try secrets.seal(identity: $0, id: id)
            }, browserApp: app?.name)
        try await registrations.insert(record, clientTokenHash: SecretToken.hash(token))
        var logger = logger
        logger[metadataKey: "registration.id"] = .string(record.idString)
        logger[metadataKey: "destination"] = .string(destination.name)
        if waits {
            metrics.increment(.registrations, [("action", "created")])
            await audit.record(
                .registrationCreated, actor: .client, registrationID: id, destination: destination.name, detail: ["policy": "approval"])
            logger.info("registration waits for approval")
            return Created(record: record, clientToken: token, flow: nil)
        }
        let proceeded = try await proceed(record, destination: destination, actor: .client, logger: logger)
        metrics.increment(.registrations, [("action", "created")])
        return Created(record: proceeded.record, clientToken: token, flow: proceeded.flow)
    }

    /// The verified user an identity token names, with the value of the destination's
    /// `identity.match` claim that later sign-ins are compared with; nil without a token where
    /// the destination allows that. A refusal is audited and counted, and creates nothing.
    /// The identity a destination's propagation grant speaks with; nil where no grant needs it
    /// (the token is then not kept at all).
    private func propagatedIdentity(
        _ verified: (user: RegistrationUser, identity: VerifiedIdentity)?, _ token: String?, destination: Destination
    ) -> PropagatedIdentity? {
        guard destination.oauth2?.propagation != nil, let verified, let token else { return nil }
        return PropagatedIdentity(token: token, verified: verified.identity)
    }

    /// `PUT /v1/registrations/me/identity`: a fresh identity token for the same verified user.
    /// Another user is `403 forbidden`; a token that does not verify is `401 invalid_identity_token`.
    package func renewIdentity(_ record: RegistrationRecord, token: String, logger: Logger) async throws {
        let destination = try conversations.destination(of: record)
        guard let current = record.user, current.verified else { throw RegistrationError.identityNotVerified }
        guard let verified = try await verifiedUser(token, destination: destination, logger: logger) else {
            throw RegistrationError.identityTokenRequired
        }
        guard verified.user.issuer == current.issuer, verified.user.subject == current.subject else {
            await audit.record(
                .identityRenewalRefused, actor: .client, registrationID: record.id, destination: destination.name,
                detail: ["issuer": verified.user.issuer])
            throw RegistrationError.identityOfAnotherUser
        }
        if let identity = propagatedIdentity(verified, token, destination: destination) {
            try await registrations.setIdentityToken(id: record.id, sealed: try secrets.seal(identity: identity, id: record.id))
            await invalidation.changed(record.id)
        }
        await audit.record(.identityRenewed, actor: .client, registrationID: record.id, destination: destination.name)
        logger.info("identity token renewed", metadata: ["registration.id": .string(record.idString)])
    }

    private func verifiedUser(
        _ token: String?, destination: Destination, logger: Logger
    ) async throws -> (user: RegistrationUser, identity: VerifiedIdentity)? {
        func refused(_ reason: String) async {
            await audit.record(.registrationRefused, actor: .client, destination: destination.name, detail: ["identity": reason])
            metrics.increment(.registrations, [("action", "refused")])
            logger.info("registration refused: identity", metadata: ["identity.check": .string(reason), "destination": .string(destination.name)])
        }
        guard let token else {
            guard !destination.identityRequired else {
                await refused("missing")
                throw RegistrationError.identityTokenRequired
            }
            return nil
        }
        do {
            let identity = try await identityTokens.verify(token)
            try await Self.accept(identity, destination: destination, client: nil, notBefores: notBefores)
            let claim = destination.identityMatchClaim
            guard let match = identity.matchValue(claim: claim) else {
                throw IdentityTokenError(
                    .missingClaim,
                    claim == "email" && identity.claims["email"]?.isEmpty == false
                        ? "the identity token's email is not verified ('email_verified' is not true), and this destination compares sign-ins by email"
                        : "the identity token has no string '\(claim.prefix(200))' claim, which this destination compares sign-ins with")
            }
            return (RegistrationUser(issuer: identity.issuer, subject: identity.subject, verified: true, match: match), identity)
        } catch let error as IdentityTokenError {
            await refused(error.check.rawValue)
            throw error
        }
    }

    /// What every verified identity must also be, beyond its signature and claims: of a provider
    /// the destination takes, and issued after any revocation of its user (or client).
    /// A store that cannot be read is its own error (`503`): no token is taken on trust.
    package static func accept(_ identity: VerifiedIdentity, destination: Destination, client: String?, notBefores: NotBefores) async throws {
        guard destination.acceptsIdentity(of: identity.issuer) else {
            throw IdentityTokenError(
                .providerNotAccepted, "the token's issuer is an identity provider this destination does not take (its identity.providers)")
        }
        guard try await notBefores.admits(issuer: identity.issuer, subject: identity.subject, client: client, issuedAt: identity.issuedAt) else {
            throw IdentityTokenError(.revoked, "the token was issued before its user's access was revoked; sign in again for a new one")
        }
    }

    /// `POST /admin/v1/registrations/{id}/approval`: a waiting registration goes on as an open one would.
    package func approve(_ record: RegistrationRecord, admin: AdminIdentity, logger: Logger) async throws -> Proceeded {
        guard record.status == .pendingApproval else { throw RegistrationError.notPendingApproval }
        let destination = try conversations.destination(of: record)
        try await registrations.setStatus(.active, id: record.id)
        await invalidation.changed(record.id)
        var active = record
        active.status = .active
        await audit.record(
            .registrationApproved, actor: .admin, registrationID: record.id, destination: record.destination, detail: ["admin": admin.name])
        metrics.increment(.registrations, [("action", "approved")])
        return try await proceed(active, destination: destination, actor: .admin, logger: logger)
    }

    /// The upstream step of a registration that may proceed: SMP registration when configured.
    private func proceed(
        _ record: RegistrationRecord, destination: Destination, actor: AuditActor, logger: Logger
    ) async throws -> Proceeded {
        let id = record.id
        guard let smp = destination.smp else {
            await audit.record(.registrationCreated, actor: actor, registrationID: id, destination: destination.name)
            logger.info("registration created")
            return Proceeded(record: record, flow: nil)
        }
        do {
            switch try await registrar.register(record, smp: smp, destination: destination) {
            case .registered(let appcid):
                var active = record
                active.appcidSealed = secrets.seal(appcid: appcid, id: id)
                try await registrations.activate(id: id, appcidSealed: active.appcidSealed)
                conversations.evict(id)  // the manager must now send the APPCID
                await audit.record(
                    .registrationCreated, actor: actor, registrationID: id, destination: destination.name, detail: ["smp": "registered"])
                logger.info("registration created", metadata: ["appcid": "present"])
                return Proceeded(record: active, flow: nil)
            case .needsLogin(let interaction):
                // Kept locally as login_required; the flow's completion registers upstream.
                try await registrations.setStatus(.loginRequired, id: id)
                var pending = record
                pending.status = .loginRequired
                let (flow, url) = try await flows.create(
                    for: pending, kind: interaction.kind, purpose: .smpRegistration, scopeKey: interaction.scopeKey,
                    challengeURL: interaction.url)
                await audit.record(
                    .registrationCreated, actor: actor, registrationID: id, destination: destination.name,
                    detail: ["smp": "login_required"])
                logger.info("registration waits for a login", metadata: ["flow.id": .string(flow.idString)])
                return Proceeded(record: pending, flow: flows.view(flow, url: url))
            }
        } catch {
            // Nothing is kept for a registration the upstream refused or could not take.
            conversations.evict(id)
            _ = try? await registrations.delete(id: id)
            let code = registrar.errorNames.code(error)
            await audit.record(
                .registrationRefused, actor: .system, registrationID: id, destination: destination.name, detail: ["code": code])
            metrics.increment(.registrations, [("action", "refused")])
            logger.info("registration refused upstream", metadata: ["problem.code": .string(code)])
            throw error
        }
    }

    /// Full teardown: the upstream SMP registration (best effort, audited when it fails),
    /// the tokens at the upstream's revocation endpoint, then the local rows (tokens,
    /// cookies, flows cascade) and every in-memory trace.
    package func deregister(_ record: RegistrationRecord, actor: AuditActor, logger: Logger) async throws {
        // An administrator deleting an agent's registration means it: the agent's tokens issued
        // until now do not create it again (the not-before of its user with its client).
        if actor == .admin, let client = record.client, let user = record.user {
            try await notBefores.set(NotBeforeKey(issuer: user.issuer, subject: user.subject, client: client), at: clock.now)
        }
        if let destination = try? conversations.destination(of: record), let smp = destination.smp,
            let appcid = try? secrets.appcid(of: record),
            let failure = await registrar.deregister(record, appcid: appcid, smp: smp, destination: destination)
        {
            await audit.record(
                .registrationUpstreamDeleteFailed, actor: .system, registrationID: record.id, destination: record.destination,
                detail: failure)
        }
        await revokeUpstream(registration: record)
        try await registrations.delete(id: record.id, event: LifecycleEvent(.revoked, detail: ["by": actor.rawValue, "reason": "deleted"]))
        await invalidation.changed(record.id)  // every instance stops using it at once
        await audit.record(.registrationDeleted, actor: actor, registrationID: record.id, destination: record.destination)
        metrics.increment(.registrations, [("action", "deleted")])
        logger.info("registration deleted", metadata: ["registration.id": .string(record.idString)])
    }

    /// RFC 7009 revocation of a registration's tokens, refresh token first; best effort, audited.
    package func revokeUpstream(registration record: RegistrationRecord) async {
        guard let destination = try? conversations.destination(of: record), let endpoint = conversations.tokenEndpoint(for: destination),
            endpoint.settings.revocationEndpoint != nil, let held = try? await tokens.tokens(registrationID: record.id)
        else { return }
        for (key, token) in held {
            var revoked = 0
            if let refresh = token.refreshToken, await endpoint.revoke(refresh, hint: "refresh_token") { revoked += 1 }
            if await endpoint.revoke(token.accessToken, hint: "access_token") { revoked += 1 }
            await audit.record(
                .tokenRevoked, actor: .system, registrationID: record.id, destination: record.destination,
                detail: ["scopeKey": key.scopeKey, "upstream": String(revoked)])
        }
    }

    /// The pending flow a `login_required` registration waits on.
    package func pendingFlow(of record: RegistrationRecord) async throws -> FlowView? {
        switch record.status {
        case .loginRequired:
            return try await flows.flows.latest(registrationID: record.id, purpose: .smpRegistration).map { flows.view($0) }
        case .reconnectRequired:
            // The sign-in it waits on (made when it became reconnect_required, or a later one).
            guard let flow = try await flows.flows.latest(registrationID: record.id, purpose: .login), flow.status == .pending else { return nil }
            return flows.view(flow)
        case .active, .pendingApproval:
            return nil
        }
    }

    /// `GET /v1/registrations/me?wait=S`: the registration as soon as its status differs from
    /// `record`'s, or after `seconds` (`LongPoll.seconds`, already clamped) as it is then; woken
    /// by the changes any instance announces. A registration deleted meanwhile is `401`, as its token is.
    package func awaitChange(of record: RegistrationRecord, seconds: Double) async throws -> RegistrationRecord {
        var current = record
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while current.status == record.status {
            let left = deadline - ContinuousClock.now
            guard left > .zero, !invalidation.changes.isClosed else { break }
            await invalidation.changes.wait(for: record.id, timeout: left)
            try Task.checkCancellation()
            guard let fresh = try await registrations.find(id: record.id) else { throw RegistrationError.clientTokenRefused }
            current = fresh
        }
        return current
    }

    /// The registration's APPCID, opened; nil before the upstream gave one.
    package func appcid(of record: RegistrationRecord) throws -> String? {
        try secrets.appcid(of: record)
    }

    package init(registrations: any RegistrationRepository, tokens: any TokenRepository, conversations: Conversations, registrar: SMPRegistrar, flows: FlowService, secrets: Secrets, invalidation: CacheInvalidation, audit: AuditLog, metrics: Metrics, clock: any WallClock, identityTokens: IdentityTokenVerifier, notBefores: NotBefores, browserApps: [BrowserApp] = []) {
        self.registrations = registrations
        self.tokens = tokens
        self.conversations = conversations
        self.registrar = registrar
        self.flows = flows
        self.secrets = secrets
        self.invalidation = invalidation
        self.audit = audit
        self.metrics = metrics
        self.clock = clock
        self.identityTokens = identityTokens
        self.notBefores = notBefores
        self.browserApps = browserApps
    }
}
