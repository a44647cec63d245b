import AuthFlows
import Conversation
import Foundation
import Hummingbird
import Logging
import ParleyCrypto

/// `POST /v1/registrations` input. Unknown members are ignored; wrong types are refused.
struct CreateRegistration: Decodable {
    var destination: String
    var deviceType: String?
    var deviceModel: String?
    var userHint: String?
    var returnUrl: String?
    var credentials: UserCredentials?
    var clientCertificate: Certificate?

    struct Certificate: Decodable {
        var pkcs12: String
        var password: String?
    }
}

extension Parley {
    /// Creates a registration locally, then registers upstream when the destination has SMP configured.
    func register(_ input: CreateRegistration, logger: Logger) async throws -> (RegistrationRecord, String, JSONValue?) {
        guard let destination = configuration.destinations[input.destination] else {
            throw Problem.invalid("unknown destination '\(input.destination.prefix(100))'")
        }
        for (field, value) in [("deviceType", input.deviceType), ("deviceModel", input.deviceModel), ("userHint", input.userHint)] {
            if let value, value.utf8.count > 256 || value.unicodeScalars.contains(where: { $0.value < 0x20 }) {
                throw Problem.invalid("\(field) must be at most 256 printable characters")
            }
        }
        if let returnUrl = input.returnUrl, !destination.allowsReturnURL(returnUrl) {
            throw Problem.invalid("returnUrl is not allowed for this destination")
        }
        var certificate: ClientCertificateMaterial?
        if let c = input.clientCertificate {
            guard let bytes = Base64.decode(c.pkcs12), !bytes.isEmpty else {
                throw Problem.invalid("clientCertificate.pkcs12 must be base64 PKCS#12")
            }
            certificate = ClientCertificateMaterial(pkcs12: bytes, password: c.password)
        }

        let id = UUID()
        let token = SecretToken.generate(prefix: "pct_")
        let encoder = JSONEncoder()
        let record = RegistrationRecord(
            id: id, destination: destination.name, status: "active", deviceType: input.deviceType,
            deviceModel: input.deviceModel, userHint: input.userHint, returnUrl: input.returnUrl,
            credentialsSealed: try input.credentials.map {
                configuration.keyRing.seal(Array(try encoder.encode($0)), associatedData: SealBinding.credentials(id))
            },
            clientCertificateSealed: try certificate.map {
                configuration.keyRing.seal(Array(try encoder.encode($0)), associatedData: SealBinding.clientCertificate(id))
            },
            createdAt: clock.now)
        try await registrations.insert(record, clientTokenHash: SecretToken.hash(token))
        var logger = logger
        logger[metadataKey: "registration.id"] = .string(record.idString)
        logger[metadataKey: "destination"] = .string(destination.name)

        guard let smp = destination.smp else {
            await audit.record("registration.created", actor: .client, registrationID: id, destination: destination.name)
            metrics.increment("parley_registrations_total", [("action", "created")])
            logger.info("registration created")
            return (record, token, nil)
        }
        do {
            switch try await registerUpstream(record, destination: destination, appId: smp.appId) {
            case .registered(let appcid):
                try await registrations.setActive(id: id, appcid: appcid)
                managers.evict(id)  // the manager must now send the APPCID
                var active = record
                active.appcidSealed = configuration.keyRing.seal(appcid, associatedData: SealBinding.appcid(id))
                await audit.record(
                    "registration.created", actor: .client, registrationID: id, destination: destination.name, detail: ["smp": "registered"])
                metrics.increment("parley_registrations_total", [("action", "created")])
                logger.info("registration created", metadata: ["appcid": "present"])
                return (active, token, nil)
            case .needsLogin(let interaction):
                // Kept locally as login_required; the flow's completion registers upstream.
                try await registrations.setLoginRequired(id: id)
                var pending = record
                pending.status = "login_required"
                let (flow, url) = try await createFlow(for: pending, kind: interaction.kind, purpose: "smp_registration", scopeKey: interaction.scopeKey)
                await audit.record(
                    "registration.created", actor: .client, registrationID: id, destination: destination.name, detail: ["smp": "login_required"])
                metrics.increment("parley_registrations_total", [("action", "created")])
                logger.info("registration waits for a login", metadata: ["flow.id": .string(flow.idString)])
                return (pending, token, flowJSON(flow, url: url))
            }
        } catch {
            // Nothing is kept for a registration the upstream refused or could not take.
            managers.evict(id)
            _ = try? await registrations.delete(id: id)
            let problem = Problem.from(error)
            await audit.record(
                "registration.refused", actor: .system, registrationID: id, destination: destination.name, detail: ["code": problem.code.rawValue])
            logger.info("registration refused upstream", metadata: ["problem.code": .string(problem.code.rawValue)])
            throw error
        }
    }

    enum UpstreamRegistration { case registered(String), needsLogin(InteractionRequest) }

    /// After the login flow of a `login_required` registration: register upstream now.
    func completeSMPRegistration(_ record: RegistrationRecord, logger: Logger) async {
        guard let destination = configuration.destinations[record.destination], let smp = destination.smp else { return }
        do {
            managers.evict(record.id)
            guard case .registered(let appcid) = try await registerUpstream(record, destination: destination, appId: smp.appId) else {
                await audit.record("registration.smp_pending", actor: .system, registrationID: record.id, destination: record.destination)
                return
            }
            try await registrations.setActive(id: record.id, appcid: appcid)
            managers.evict(record.id)
            proxyRegistrations.removeAll()
            await audit.record("registration.activated", actor: .system, registrationID: record.id, destination: record.destination)
        } catch {
            await audit.record(
                "registration.smp_failed", actor: .system, registrationID: record.id, destination: record.destination,
                detail: ["code": Problem.from(error).code.rawValue])
            logger.warning("upstream registration after login failed", metadata: ["error": "\(error)"])
        }
    }

    /// `POST {url}/odata/applications/latest/{appId}/Connections` through the registration's
    /// own manager; the APPCID comes back in the `X-SMP-APPCID` cookie (seed 003).
    private func registerUpstream(_ record: RegistrationRecord, destination: Destination, appId: String) async throws -> UpstreamRegistration {
        var body: [String: JSONValue] = [:]
        if let t = record.deviceType { body["DeviceType"] = .string(t) }
        if let m = record.deviceModel { body["DeviceModel"] = .string(m) }
        let request = UpstreamRequest(
            method: "POST", url: smpConnectionsURL(destination, appId: appId),
            headers: ["Content-Type": "application/json;charset=utf-8", "Accept": "application/json"],
            body: .bytes(JSONValue.object(body).encoded()))
        let result = try await manager(for: record).execute(request)
        let response: UpstreamResponse
        switch result {
        case .interactionRequired(let interaction): return .needsLogin(interaction)
        case .response(let r): response = r
        }
        response.body.discard()
        switch response.status {
        case 201, 200:
            if let appcid = Self.appcid(from: response.headers) { return .registered(appcid) }
            throw Problem(.badGateway, .upstreamUnavailable, "the upstream registration answered without an APPCID")
        case 401, 403:
            throw Problem(.forbidden, .upstreamUnauthorized, "the upstream refused the registration's credentials")
        default:
            throw Problem(.badGateway, .upstreamUnavailable, "the upstream registration answered \(response.status)")
        }
    }

    static func appcid(from headers: HeaderFields) -> String? {
        for header in headers.values("Set-Cookie") {
            let pair = header.split(separator: ";", maxSplits: 1)[0]
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == "X-SMP-APPCID" {
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                if !value.isEmpty { return value }
            }
        }
        return headers["X-SMP-APPCID"]
    }

    func smpConnectionsURL(_ destination: Destination, appId: String) -> String {
        destination.baseURL + "/odata/applications/latest/" + ProxyRules.percentEncodeSegment(Array(appId.utf8)) + "/Connections"
    }

    /// Full teardown: the upstream SMP registration (best effort, audited when it fails),
    /// then the local rows (tokens, cookies, flows cascade) and every in-memory trace.
    func deregister(_ record: RegistrationRecord, actor: AuditLog.Actor, logger: Logger) async throws {
        if let destination = configuration.destinations[record.destination], let smp = destination.smp,
            let appcid = try? registrations.appcid(of: record)
        {
            let escaped = appcid.replacingOccurrences(of: "'", with: "''")
            let url = smpConnectionsURL(destination, appId: smp.appId) + "('" + ProxyRules.percentEncodeSegment(Array(escaped.utf8)) + "')"
            do {
                let result = try await manager(for: record).execute(UpstreamRequest(method: "DELETE", url: url))
                if case .response(let response) = result {
                    response.body.discard()
                    if !(200..<300).contains(response.status) {
                        await audit.record(
                            "registration.upstream_delete_failed", actor: .system, registrationID: record.id,
                            destination: record.destination, detail: ["status": String(response.status)])
                    }
                }
            } catch {
                await audit.record(
                    "registration.upstream_delete_failed", actor: .system, registrationID: record.id, destination: record.destination,
                    detail: ["code": Problem.from(error).code.rawValue])
            }
        }
        await revokeUpstream(registration: record)
        try await registrations.delete(id: record.id)
        proxyRegistrations.removeAll()
        cookies.forget(registrationID: record.idString)
        managers.evict(record.id)
        csrfTokens.forget(registrationID: record.idString)
        await audit.record("registration.deleted", actor: actor, registrationID: record.id, destination: record.destination)
        metrics.increment("parley_registrations_total", [("action", "deleted")])
        logger.info("registration deleted", metadata: ["registration.id": .string(record.idString)])
    }

    /// RFC 7009 revocation of a registration's tokens, refresh token first; best effort, audited.
    func revokeUpstream(registration record: RegistrationRecord) async {
        guard let destination = configuration.destinations[record.destination], let endpoint = configurator.tokenEndpoint(for: destination),
            endpoint.settings.revocationEndpoint != nil, let held = try? await tokens.tokens(registrationID: record.id, destination: record.destination)
        else { return }
        for (key, token) in held {
            var revoked = 0
            if let refresh = token.refreshToken, await endpoint.revoke(refresh, hint: "refresh_token") { revoked += 1 }
            if await endpoint.revoke(token.accessToken, hint: "access_token") { revoked += 1 }
            await audit.record(
                "token.revoked", actor: .system, registrationID: record.id, destination: record.destination,
                detail: ["scopeKey": key.scopeKey, "upstream": String(revoked)])
        }
    }

    func registrationJSON(_ r: RegistrationRecord, clientToken: String? = nil, flow: JSONValue? = nil) throws -> JSONValue {
        var object: [String: JSONValue] = [
            "id": .string(r.idString),
            "destination": .string(r.destination),
            "status": .string(r.status),
            "appcid": .optional(try registrations.appcid(of: r)),
            "deviceType": .optional(r.deviceType),
            "deviceModel": .optional(r.deviceModel),
            "userHint": .optional(r.userHint),
            "createdAt": .string(RFC3339.format(r.createdAt)),
            "flow": flow ?? .null,
        ]
        if let clientToken { object["clientToken"] = .string(clientToken) }
        return .object(object)
    }
}

enum RFC3339 {
    static func format(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: false, timeZone: TimeZone(identifier: "UTC")!))
    }
}
