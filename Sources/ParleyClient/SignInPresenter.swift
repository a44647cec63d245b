import Foundation

#if canImport(AuthenticationServices)
import AuthenticationServices
#endif

/// Shows a person the flow's page and returns when they are done there (or throws when they
/// gave up). The conversation then waits for the flow on Parley's side and retries the call.
/// In the seeds' terms: the SAML2, OTP, OAuth2 and Basic providers, now one.
public protocol SignInPresenter: Sendable {
    func present(_ flow: Flow) async throws
}

/// A presenter that is a closure: a command-line tool that prints the URL and waits, a test
/// that drives a browser, a Linux app's own web view.
public struct ClosureSignInPresenter: SignInPresenter {
    private let body: @Sendable (Flow) async throws -> Void

    public init(_ body: @escaping @Sendable (Flow) async throws -> Void) { self.body = body }

    public func present(_ flow: Flow) async throws { try await body(flow) }
}

/// The person declined the sign-in.
public struct SignInCancelled: Error, Sendable {}

#if canImport(AuthenticationServices) && !os(watchOS)
/// The flow's page in `ASWebAuthenticationSession`: the system's browser sheet, which ends when
/// the flow's done page sends it to `callbackScheme` (the registration's `returnUrl` must use it,
/// e.g. `com.example.app://signed-in`, listed in the destination's `allowedReturnUrls`).
@MainActor
public final class WebAuthenticationSessionPresenter: NSObject, SignInPresenter, ASWebAuthenticationPresentationContextProviding {
    public let callbackScheme: String
    private let anchor: @MainActor () -> ASPresentationAnchor

    public init(callbackScheme: String, anchor: @escaping @MainActor () -> ASPresentationAnchor) {
        self.callbackScheme = callbackScheme
        self.anchor = anchor
    }

    public nonisolated func present(_ flow: Flow) async throws {
        guard let url = flow.url else { return }
        try await show(url)
    }

    private func show(_ url: URL) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let session = ASWebAuthenticationSession(url: url, callbackURLScheme: callbackScheme) { _, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
            session.presentationContextProvider = self
            session.prefersEphemeralWebBrowserSession = false
            if !session.start() { continuation.resume(throwing: SignInCancelled()) }
        }
    }

    public func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor { anchor() }
}
#endif
