package import AuthFlows
package import Conversation
package import Foundation

/// What an upstream set through `/web/{destination}/…` while a flow was open, kept with the
/// flow (sealed in `flows.staged_cookies_sealed`) instead of in the registration's jar. It
/// reaches the jar only when the flow completes and its sign-in passed the identity check
/// (`FlowService.finish`), so a sign-in as somebody else leaves the registration as it was.
package struct StagedCookies: Codable, Sendable, Equatable {
    /// One cookie as the jar keeps it (`StoredCookie`, in a form that can be sealed as JSON).
    package struct Cookie: Codable, Sendable, Equatable {
        package var name, value, domain, path: String
        package var hostOnly, secure, httpOnly: Bool
        package var expiresAt: Date?

        package init(_ c: StoredCookie) {
            (name, value, domain, path) = (c.name, c.value, c.domain, c.path)
            (hostOnly, secure, httpOnly, expiresAt) = (c.hostOnly, c.secure, c.httpOnly, c.expiresAt)
        }

        package var stored: StoredCookie {
            StoredCookie(
                name: name, value: value, domain: domain, path: path, hostOnly: hostOnly, secure: secure, httpOnly: httpOnly,
                expiresAt: expiresAt)
        }
    }

    /// A cookie's identity (RFC 6265: name, domain, path).
    package struct Identity: Codable, Sendable, Hashable {
        package var name, domain, path: String
    }

    package var stored: [Cookie] = []
    /// Cookies the upstream removed (`Max-Age=0`) during the flow.
    package var deleted: [Identity] = []

    /// The registration's cookies as the flow's browser sees them: the staged ones over the jar's.
    package func overlay(_ jar: [StoredCookie]) -> [StoredCookie] {
        let shadowed = Set(stored.map { Identity(name: $0.name, domain: $0.domain, path: $0.path) } + deleted)
        return jar.filter { !shadowed.contains(Identity(name: $0.name, domain: $0.domain, path: $0.path)) } + stored.map(\.stored)
    }

    /// Applies what one answer set, as the jar would (the last of one identity wins).
    package mutating func apply(_ outcomes: [Cookies.Outcome]) {
        for outcome in outcomes {
            switch outcome {
            case .store(let cookie):
                let id = Identity(name: cookie.name, domain: cookie.domain, path: cookie.path)
                stored.removeAll { Identity(name: $0.name, domain: $0.domain, path: $0.path) == id }
                deleted.removeAll { $0 == id }
                stored.append(Cookie(cookie))
            case .delete(let name, let domain, let path):
                let id = Identity(name: name, domain: domain, path: path)
                stored.removeAll { Identity(name: $0.name, domain: $0.domain, path: $0.path) == id }
                if !deleted.contains(id) { deleted.append(id) }
            case .ignore:
                break
            }
        }
        // Bounded like a jar: a flow cannot stage more than a registration may keep.
        if stored.count > Cookies.maxCookies { stored.removeFirst(stored.count - Cookies.maxCookies) }
        if deleted.count > Cookies.maxCookies { deleted.removeFirst(deleted.count - Cookies.maxCookies) }
    }
}

/// Reads, changes (compare-and-set) and commits a flow's staged cookies.
package struct CookieStaging: Sendable {
    package static let maxAttempts = 8

    package let flows: any FlowRepository
    package let secrets: Secrets
    package let cookies: any CookieRecords
    package let clock: any WallClock

    package func read(_ flow: FlowRecord) throws -> StagedCookies {
        guard let bytes = try secrets.stagedCookies(of: flow) else { return StagedCookies() }
        return try JSONDecoder().decode(StagedCookies.self, from: Data(bytes))
    }

    /// The `Cookie` header the flow's browser sends upstream for `url`.
    package func cookieHeader(for url: String, flowID: UUID, registrationID: String) async throws -> String? {
        guard let parts = URLParts(url), let flow = try await flows.find(id: flowID) else { return nil }
        let jar = try await cookies.cookies(registrationID: registrationID)
        return Cookies.header(for: parts, from: try read(flow).overlay(jar), at: clock.now)
    }

    /// Stages what an answer to `url` set. A flow that is no longer pending stages nothing.
    package func stage(setCookies: [String], from url: String, flowID: UUID) async throws {
        guard let parts = URLParts(url) else { return }
        let now = clock.now
        let outcomes = setCookies.map { Cookies.parse($0, from: parts, at: now) }
        guard outcomes.contains(where: { $0 != .ignore }) else { return }
        for _ in 0..<Self.maxAttempts {
            guard let flow = try await flows.find(id: flowID), flow.status == .pending else { return }
            var staged = try read(flow)
            staged.apply(outcomes)
            let sealed = secrets.seal(stagedCookies: Array(try JSONEncoder().encode(staged)), flowID: flow.idString)
            if try await flows.replaceStagedCookies(id: flow.id, expected: flow.stagedCookies, with: sealed) { return }
        }
        throw FlowKindStateError.contended
    }

    /// Moves the flow's staged cookies into its registration's jar (the jar's limits apply).
    package func commit(_ flow: FlowRecord) async throws {
        let staged = try read(flow)
        guard !staged.stored.isEmpty || !staged.deleted.isEmpty else { return }
        let registrationID = flow.registrationID.uuidString.lowercased()
        let existing = try await cookies.cookies(registrationID: registrationID)
        let admitted = Cookies.admit(
            store: staged.stored.map(\.stored), delete: staged.deleted.map { ($0.name, $0.domain, $0.path) }, existing: existing, at: clock.now)
        try await cookies.apply(registrationID: registrationID, store: admitted.store, delete: admitted.delete)
    }

    package init(flows: any FlowRepository, secrets: Secrets, cookies: any CookieRecords, clock: any WallClock) {
        self.flows = flows
        self.secrets = secrets
        self.cookies = cookies
        self.clock = clock
    }
}

/// The jar of a flow's browser: the registration's cookies overlaid with the flow's staged
/// ones; what the upstream sets is staged with the flow.
package struct StagedCookieJar: CookieStorage {
    package let staging: CookieStaging
    package let flowID: UUID
    package let registrationID: String

    package func cookieHeader(for url: String) async throws -> String? {
        try await staging.cookieHeader(for: url, flowID: flowID, registrationID: registrationID)
    }

    package func store(setCookies: [String], from url: String) async throws {
        try await staging.stage(setCookies: setCookies, from: url, flowID: flowID)
    }
}
