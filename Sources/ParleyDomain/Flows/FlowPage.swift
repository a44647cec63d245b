package import AuthFlows
package import Foundation

/// What a flow kind answers a browser with: a value, not an HTTP response. The pages'
/// HTTP form (headers, templates, status, language) is `Pages.response`'s alone.
package enum FlowPage: Sendable {
    /// Onward to `location` (`303` unless said otherwise), setting `cookies` (whole
    /// `Set-Cookie` values) on the way.
    case redirect(String, status: PageStatus = .seeOther, cookies: [String] = [])
    /// The Basic form's credentials page (the password is never put back).
    case credentialsForm(CredentialsForm)
    /// How a flow ended (or that it has not yet): the done page.
    case finished(FinishedPage)
    /// Something went wrong that the person can do something about; `service` is the
    /// destination's name and `age` how long ago the flow started, when they are known.
    case notice(PageNotice, service: String? = nil, age: PageAge? = nil)
    /// A page with a kind's own message (not localized); `attributes` become `data-…` attributes.
    case message(PageStatus, title: String, message: String, attributes: [String: String])
    /// A failure without a notice of its own, shown as an HTML page with the status and code
    /// the edge's error mapping gives it.
    case failure(any Error)
    /// Who asked for this sign-in, and one button that continues it (`FlowConfirmation`).
    case confirmation(ConfirmationPage, cookies: [String])
    /// Onward to `location` after a form post, setting `cookies`: a `200` page the browser leaves
    /// at once (`Refresh: 0`, and a link). A redirect answering a post would be held to the
    /// page's `form-action 'self'` by browsers, all the way to the authorization server or IdP.
    case onward(String, cookies: [String])
}

/// A page's HTTP status, as a number the edge turns into its response: the few a kind names.
package struct PageStatus: Sendable, Equatable {
    package let code: Int

    package static let ok = PageStatus(code: 200)
    package static let found = PageStatus(code: 302)
    package static let seeOther = PageStatus(code: 303)
}

extension FlowPage {
    /// This page as the answer to a form post: a redirect becomes `onward`.
    package var answeringPost: FlowPage {
        guard case .redirect(let location, _, let cookies) = self else { return self }
        return .onward(location, cookies: cookies)
    }
}

/// Who asked for a sign-in, as the pages name them: the app (an agent's OAuth client, else the
/// destination's SMP application id) and the device the registration described.
package struct PageRequester: Sendable, Equatable {
    package var app: String?
    package var deviceType: String?
    package var deviceModel: String?
    package var userHint: String?

    package init(app: String? = nil, deviceType: String? = nil, deviceModel: String? = nil, userHint: String? = nil) {
        self.app = app
        self.deviceType = deviceType
        self.deviceModel = deviceModel
        self.userHint = userHint
    }

    package init(_ registration: RegistrationRecord, destination: Destination?) {
        self.init(
            app: registration.client ?? destination?.smp?.appId, deviceType: registration.deviceType, deviceModel: registration.deviceModel,
            userHint: registration.userHint)
    }

    /// The device in a few words: "iPhone (iPhone15,3)", or whichever half is known.
    package var device: String? {
        switch (deviceType, deviceModel) {
        case (let type?, let model?) where type != model: "\(type) (\(model))"
        case (let type?, _): type
        case (nil, let model?): model
        case (nil, nil): nil
        }
    }
}

/// A page that tells the person something went wrong, and what to do: each has its texts in
/// the catalogs (`notice.<case>.title`, `.text`) and the status and problem code it answers with
/// (`data-parley-error` on the page).
package enum PageNotice: String, CaseIterable, Sendable {
    case linkNotValid, cannotStart, formFromOtherPage, confirmationNotValid, expired, answerNotValid
    case passcodeNotAwaited, passcodeMissing, passcodeRefused
    case noSignInHere, cannotHost, moreThanOneSignIn, noSuchService, notServedHere, notThisBrowser
}

/// The Basic form's page. The password is never put back into it.
package struct CredentialsForm: Sendable, Equatable {
    package enum Error: String, Sendable, CaseIterable { case incomplete, refused }
    /// The destination's name.
    package let service: String
    package let action: String
    package let secret: String
    package let error: Error?
    package let requester: PageRequester?
}

/// The end of a flow as its done page tells it.
package struct FinishedPage: Sendable, Equatable {
    /// The failure reasons the catalogs explain in words (`failed.<reason>`); others get a general text.
    package static let explainedReasons: Set<String> = ["access_denied", "identity_mismatch", "identity_unknown", "stale_sign_in", "too_many_attempts"]

    package let service: String?
    package let status: FlowStatus
    package let reason: String?
    package let age: PageAge
    package let requester: PageRequester?

    package init(service: String? = nil, status: FlowStatus, reason: String? = nil, age: PageAge, requester: PageRequester? = nil) {
        self.service = service
        self.status = status
        self.reason = reason
        self.age = age
        self.requester = requester
    }
}

/// How long ago a flow started, to be said in the page's language.
package enum PageAge: Equatable, Sendable {
    case justNow
    case minutes(Int)
    case hours(Int)
    case days(Int)

    package init(since start: Date, now: Date) {
        let seconds = now.timeIntervalSince(start)
        guard seconds.isFinite, seconds >= 60 else {
            self = .justNow
            return
        }
        let minutes = Int(min(seconds, 1e9) / 60)
        if minutes < 60 {
            self = .minutes(minutes)
        } else if minutes / 60 < 48 {
            self = .hours(minutes / 60)
        } else {
            self = .days(minutes / 60 / 24)
        }
    }

    package var key: String {
        switch self {
        case .justNow: "age.justNow"
        case .minutes(let n): n == 1 ? "age.minute" : "age.minutes"
        case .hours(let n): n == 1 ? "age.hour" : "age.hours"
        case .days: "age.days"
        }
    }

    package var count: Int {
        switch self {
        case .justNow: 0
        case .minutes(let n), .hours(let n), .days(let n): n
        }
    }
}
