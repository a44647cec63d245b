package import AuthFlows
package import Conversation
import Foundation
package import Logging
import ParleyEncoding

/// Why the upstream did not take an SMP registration.
package enum SMPRegistrationError: Error, Sendable, Equatable {
    /// `200`/`201` without an `X-SMP-APPCID` cookie or header.
    case answeredWithoutAPPCID
    /// `401`/`403`: the registration's credentials were refused.
    case credentialsRefused
    /// Any other status.
    case unexpectedStatus(Int)
}

/// SMP registration upstream (seed 003), through the registration's own conversation
/// manager: `POST …/Connections` gives the APPCID; `DELETE …/Connections('…')` ends it.
package struct SMPRegistrar: Sendable {
    package enum Outcome { case registered(appcid: String), needsLogin(InteractionRequest) }

    /// The body of `POST …/Connections`; a device field the registration lacks is left out.
    package struct Connection: Encodable {
        package var deviceType: String?
        package var deviceModel: String?

        package init(deviceType: String? = nil, deviceModel: String? = nil) {
            self.deviceType = deviceType
            self.deviceModel = deviceModel
        }

        package enum CodingKeys: String, CodingKey {
            case deviceType = "DeviceType"
            case deviceModel = "DeviceModel"
        }
    }

    package let conversations: Conversations
    /// How the audit log names what went wrong upstream.
    package let errorNames: ErrorNames

    package func register(_ record: RegistrationRecord, smp: SMPSettings, destination: Destination) async throws -> Outcome {
        let request = UpstreamRequest(
            method: "POST", url: connectionsURL(destination, smp: smp),
            headers: ["Content-Type": "application/json;charset=utf-8", "Accept": "application/json"],
            body: .bytes(try JSONValueEncoder().encode(Connection(deviceType: record.deviceType, deviceModel: record.deviceModel)).encoded()))
        let response: UpstreamResponse
        switch try await conversations.manager(for: record).execute(request) {
        case .interactionRequired(let interaction): return .needsLogin(interaction)
        case .response(let r): response = r
        }
        response.body.discard()
        switch response.status {
        case 200, 201:
            if let appcid = Self.appcid(from: response.headers) { return .registered(appcid: appcid) }
            throw SMPRegistrationError.answeredWithoutAPPCID
        case 401, 403:
            throw SMPRegistrationError.credentialsRefused
        default:
            throw SMPRegistrationError.unexpectedStatus(response.status)
        }
    }

    /// Deletes the upstream registration; returns what went wrong, for the audit log, or nil.
    package func deregister(_ record: RegistrationRecord, appcid: String, smp: SMPSettings, destination: Destination) async -> [String: String]? {
        let escaped = appcid.replacingOccurrences(of: "'", with: "''")
        let url = connectionsURL(destination, smp: smp) + "('" + PercentEncoding.encodePathSegment(Array(escaped.utf8)) + "')"
        do {
            if case .response(let response) = try await conversations.manager(for: record).execute(UpstreamRequest(method: "DELETE", url: url)) {
                response.body.discard()
                if !(200..<300).contains(response.status) { return ["status": String(response.status)] }
            }
            return nil
        } catch {
            return ["code": errorNames.code(error)]
        }
    }

    package func connectionsURL(_ destination: Destination, smp: SMPSettings) -> String {
        destination.baseURL + "/odata/applications/latest/" + PercentEncoding.encodePathSegment(Array(smp.appId.utf8)) + "/Connections"
    }

    /// The APPCID from the `X-SMP-APPCID` cookie, or the header of that name.
    package static func appcid(from headers: HeaderFields) -> String? {
        for header in headers.values("Set-Cookie") {
            guard let pair = header.split(separator: ";", maxSplits: 1).first else { continue }
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == "X-SMP-APPCID" {
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                if !value.isEmpty { return value }
            }
        }
        return headers["X-SMP-APPCID"]
    }

    package init(conversations: Conversations, errorNames: ErrorNames) {
        self.conversations = conversations
        self.errorNames = errorNames
    }
}

/// After the login flow of a `login_required` registration: register upstream now,
/// on whichever instance the flow completed.
package struct SMPActivation: FlowCompletion {
    package let registrations: any RegistrationRepository
    package let registrar: SMPRegistrar
    package let conversations: Conversations
    package let invalidation: CacheInvalidation
    package let secrets: Secrets
    package let audit: AuditLog

    package func flowCompleted(_ flow: FlowRecord, lifecycle: FlowService, logger: Logger) async {
        do {
            guard let record = try await registrations.find(id: flow.registrationID),
                let destination = try? conversations.destination(of: record), let smp = destination.smp
            else { return }
            conversations.evict(record.id)
            switch try await registrar.register(record, smp: smp, destination: destination) {
            case .registered(let appcid):
                try await registrations.activate(id: record.id, appcidSealed: secrets.seal(appcid: appcid, id: record.id))
            case .needsLogin(let interaction):
                // The registration endpoint asks for a person once more (a second factor after the
                // sign-in): the registration waits on that flow now, and the app has it to open.
                let (next, _) = try await lifecycle.create(
                    for: record, kind: interaction.kind, purpose: .smpRegistration, scopeKey: interaction.scopeKey, challengeURL: interaction.url)
                await audit.record(
                    .registrationSMPPending, actor: .system, registrationID: record.id, destination: record.destination,
                    detail: ["flow": next.idString, "kind": next.kind.rawValue])
                logger.info(
                    "upstream registration needs another sign-in", metadata: ["flow.id": .string(next.idString), "flow.kind": .string(next.kind.rawValue)])
                await invalidation.changed(record.id)  // long-polls of the registration see its new flow
                return
            }
            await invalidation.changed(record.id)  // managers must send the APPCID, everywhere
            await audit.record(.registrationActivated, actor: .system, registrationID: record.id, destination: record.destination)
        } catch {
            await audit.record(
                .registrationSMPFailed, actor: .system, registrationID: flow.registrationID,
                detail: ["code": registrar.errorNames.code(error)])
            logger.warning("upstream registration after login failed", metadata: ["error": "\(error)"])
        }
    }

    package init(registrations: any RegistrationRepository, registrar: SMPRegistrar, conversations: Conversations, invalidation: CacheInvalidation, secrets: Secrets, audit: AuditLog) {
        self.registrations = registrations
        self.registrar = registrar
        self.conversations = conversations
        self.invalidation = invalidation
        self.secrets = secrets
        self.audit = audit
    }
}
