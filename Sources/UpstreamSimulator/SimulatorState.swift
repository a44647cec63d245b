import Foundation
import Synchronization

/// What the simulator has seen, for tests to read, and the port it listens on once bound.
public final class SimulatorState: Sendable {
    private let box = Mutex(Data())

    /// SMP sessions, registrations, CSRF tokens and their counters (SessionStore.swift).
    public let smp = SMPState()
    /// The OAuth2 authorization server's codes, tokens, test controls and counters (OAuthState.swift).
    public let oauth = OAuthState()
    /// The `/sp` service provider's settings and the mock IdP (SAMLState.swift).
    public let saml = SAMLState()
    /// One-time passcodes of `/sp` and `/basic-otp` (SAMLState.swift).
    public let otp = OTPState()
    /// The demo identity provider's signing keys (`GET /idp/jwks`, `POST /control/identity-token`):
    /// made when first asked for (RSA key generation takes a moment), never stored.
    private let identitySigner = Mutex<IdentityIssuer?>(nil)
    /// Browser sessions of `/sp` (`SP_SESSION`) and `/basic-otp` (`BO_SESSION`).
    let spSessions = WebSessions()
    let basicOTPSessions = WebSessions()

    public init() {}

    /// The demo identity provider's keys; nil only when key generation failed.
    public var identityProvider: IdentityIssuer? {
        identitySigner.withLock { signer in
            if signer == nil { signer = try? IdentityIssuer() }
            return signer
        }
    }

    /// Requests seen per route, keyed like `"GET /api/data"` or `"ANY /echo"`.
    public func requests(route: String) -> Int {
        box.withLock { $0.requestsByRoute[route, default: 0] }
    }

    /// Every route with its count.
    public var requestsByRoute: [String: Int] { box.withLock { $0.requestsByRoute } }

    public var totalRequests: Int { box.withLock { $0.requestsByRoute.values.reduce(0, +) } }

    /// `GET /stall` responses still open, and those ended because the client went away.
    public var openStalls: Int { box.withLock { $0.openStalls } }
    public var abandonedStalls: Int { box.withLock { $0.abandonedStalls } }

    /// Forgets every SMP, `/sp`, `/basic-otp` and OAuth2 login session (`POST /sim/sessions/expire`).
    public func expireSessions() {
        smp.expireSessions()
        oauth.expireSessions()
        spSessions.expireAll()
        basicOTPSessions.expireAll()
    }

    /// The bound port, nil until the server listens.
    public var port: Int? { box.withLock { $0.port } }

    /// Waits until the server listens and returns its port (port 0 resolved); nil when
    /// the server stopped without listening (see `runSimulator`).
    public func boundPort() async -> Int? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
            let known: Int?? = box.withLock { data in
                if let port = data.port { return .some(port) }
                if data.stopped { return .some(nil) }
                data.portWaiters.append(continuation)
                return nil
            }
            if let known { continuation.resume(returning: known) }
        }
    }

    // MARK: Recording (internal)

    /// Waits until `route` has seen at least `count` requests (counted when the handler
    /// starts, before it answers).
    public func waitForRequests(route: String, count: Int = 1) async {
        await waitForRequests(route: route, count: count, id: nil)
    }

    /// As above, but gives up after `timeout`; whether the count was reached.
    public func waitForRequests(route: String, count: Int = 1, timeout: Duration) async -> Bool {
        let id = UUID()
        let timer = Task { [self] in
            try? await Task.sleep(for: timeout)
            let expired = box.withLock { data -> CheckedContinuation<Void, Never>? in
                data.expiredWaiters.insert(id)
                guard let index = data.requestWaiters.firstIndex(where: { $0.id == id }) else { return nil }
                return data.requestWaiters.remove(at: index).continuation
            }
            expired?.resume()
        }
        await waitForRequests(route: route, count: count, id: id)
        timer.cancel()
        return requests(route: route) >= count
    }

    private func waitForRequests(route: String, count: Int, id: UUID?) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let reached = box.withLock { data -> Bool in
                if data.requestsByRoute[route, default: 0] >= count { return true }
                // A timer that fired before the wait began has ended it already.
                if let id, data.expiredWaiters.contains(id) { return true }
                data.requestWaiters.append((route, count, continuation, id))
                return false
            }
            if reached { continuation.resume() }
        }
    }

    func record(_ route: String) {
        let ready = box.withLock { data -> [CheckedContinuation<Void, Never>] in
            data.requestsByRoute[route, default: 0] += 1
            let seen = data.requestsByRoute[route, default: 0]
            var ready: [CheckedContinuation<Void, Never>] = []
            data.requestWaiters.removeAll { waiter in
                guard waiter.route == route, seen >= waiter.count else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    func stallOpened() { box.withLock { $0.openStalls += 1 } }

    func stallClosed(abandoned: Bool) {
        box.withLock {
            $0.openStalls -= 1
            if abandoned { $0.abandonedStalls += 1 }
        }
    }

    func bound(port: Int) {
        let waiters = box.withLock { data -> [CheckedContinuation<Int?, Never>] in
            data.port = port
            defer { data.portWaiters = [] }
            return data.portWaiters
        }
        for waiter in waiters { waiter.resume(returning: port) }
    }

    func stopped() {
        let waiters = box.withLock { data -> [CheckedContinuation<Int?, Never>] in
            data.stopped = true
            defer { data.portWaiters = [] }
            return data.portWaiters
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }

    private struct Data {
        var requestsByRoute: [String: Int] = [:]
        var openStalls = 0
        var abandonedStalls = 0
        var port: Int?
        var stopped = false
        var portWaiters: [CheckedContinuation<Int?, Never>] = []
        var requestWaiters: [(route: String, count: Int, continuation: CheckedContinuation<Void, Never>, id: UUID?)] = []
        /// Bounded waits whose time ran out.
        var expiredWaiters: Set<UUID> = []
    }
}
