import Foundation
import ParleyEncoding
import ParleyTesting
import Testing
import UpstreamSimulator

/// The headers Parley sends when it shows destination `sp` at `http://127.0.0.1:8080/web/sp/…`.
let parleyForwarded = [("X-Forwarded-Proto", "http"), ("X-Forwarded-Host", "127.0.0.1:8080"), ("X-Forwarded-Prefix", "/web/sp")]
let parleyBase = "http://127.0.0.1:8080/web/sp"
let parleyACS = parleyBase + "/saml/acs"

func directBase(_ port: Int) -> String { "http://127.0.0.1:\(port)/sp" }

func get(_ port: Int, _ target: String, _ headers: [(String, String)] = []) async throws -> RawHTTPResponse {
    try await RawHTTP.request(port: port, method: "GET", target: target, headers: headers)
}

private func htmlUnescape(_ text: String) -> String {
    text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
        .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
        .replacingOccurrences(of: "&amp;", with: "&")
}

private func captures(_ pattern: String, in text: String) -> [[String]] {
    guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
    let range = NSRange(text.startIndex..., in: text)
    return regex.matches(in: text, range: range).map { match in
        (1..<match.numberOfRanges).compactMap { Range(match.range(at: $0), in: text).map { htmlUnescape(String(text[$0])) } }
    }
}

/// The hidden inputs of an HTML page by name.
func hiddenInputs(_ response: RawHTTPResponse) -> [String: String] {
    var out: [String: String] = [:]
    for pair in captures(#"<input type="hidden" name="([^"]*)" value="([^"]*)">"#, in: response.text) where pair.count == 2 {
        out[pair[0]] = pair[1]
    }
    return out
}

/// The `action` of the page's (first) form.
func formAction(_ response: RawHTTPResponse) -> String? {
    captures(#"<form method="post" action="([^"]*)">"#, in: response.text).first?.first
}

/// A base64 SAML message as text.
func decodedXML(_ base64: String) -> String {
    String(decoding: Base64.decode(base64) ?? [], as: UTF8.self)
}

/// The value of attribute `name` in `xml` (first occurrence).
func xmlAttribute(_ name: String, in xml: String) -> String? {
    captures(" \(name)=\"([^\"]*)\"", in: xml).first?.first
}

/// A SAMLResponse page the IdP produced for a challenge, not yet posted to the ACS.
struct IdPAnswer {
    /// The `ID` of the AuthnRequest the IdP answered.
    let requestID: String
    let acsURL: String
    let samlResponse: String
    let relayState: String
    let page: RawHTTPResponse
}

/// Opens `target` below the SP with `headers`, takes the SAML challenge (either binding) to the
/// IdP and signs in there as alice. The ACS URL must be registered.
func signInAtIdP(_ port: Int, target: String, headers: [(String, String)]) async throws -> IdPAnswer {
    let challenge = try await get(port, target, headers)
    let request: String
    let relayState: String
    if challenge.status == 302, let location = challenge.header("Location") {
        let query = queryItems(location)
        request = try #require(query["SAMLRequest"])
        relayState = try #require(query["RelayState"])
    } else {
        #expect(challenge.status == 200)
        let inputs = hiddenInputs(challenge)
        request = try #require(inputs["SAMLRequest"])
        relayState = try #require(inputs["RelayState"])
    }
    let login = try await postForm(
        port, "/idp/login",
        [("username", "alice"), ("password", "wonderland"), ("SAMLRequest", request), ("RelayState", relayState)])
    #expect(login.status == 200)
    let inputs = hiddenInputs(login)
    return IdPAnswer(
        requestID: try #require(xmlAttribute("ID", in: decodedXML(request))),
        acsURL: try #require(formAction(login)), samlResponse: try #require(inputs["SAMLResponse"]),
        relayState: try #require(inputs["RelayState"]), page: login)
}

/// Posts an IdP answer to the SP's ACS as the browser (through Parley, when `headers` say so) would.
func postToACS(_ port: Int, _ answer: IdPAnswer, samlResponse: String? = nil, headers: [(String, String)]) async throws -> RawHTTPResponse {
    try await postForm(
        port, "/sp/saml/acs", [("SAMLResponse", samlResponse ?? answer.samlResponse), ("RelayState", answer.relayState)], headers: headers)
}

/// Signs in through challenge, IdP and ACS; returns the ACS answer and the `SP_SESSION` cookie header.
func signInToSP(
    _ port: Int, target: String = "/sp/api/data", headers: [(String, String)] = parleyForwarded
) async throws -> (acs: RawHTTPResponse, cookie: (String, String)) {
    let answer = try await signInAtIdP(port, target: target, headers: headers)
    let acs = try await postToACS(port, answer, headers: headers)
    let session = try #require(setCookie("SP_SESSION", in: acs), "ACS answered \(acs.status): \(acs.text)")
    return (acs, ("Cookie", "SP_SESSION=\(session)"))
}

/// The current passcode from `GET /control/otp/code`.
func currentPasscode(_ port: Int, user: String = "alice") async throws -> String {
    let response = try await get(port, "/control/otp/code?user=\(user)")
    return try #require(string(response, "code"))
}

/// `POST /control/sp` with a JSON body.
func setSP(_ port: Int, _ json: String) async throws -> RawHTTPResponse {
    try await RawHTTP.request(
        port: port, method: "POST", target: "/control/sp", headers: [("Content-Type", "application/json")], body: Array(json.utf8))
}

/// `POST /control/saml/acs` with the URLs as a JSON array.
func registerACS(_ port: Int, _ urls: [String]) async throws -> RawHTTPResponse {
    let body = try JSONSerialization.data(withJSONObject: urls, options: [.withoutEscapingSlashes])
    return try await RawHTTP.request(
        port: port, method: "POST", target: "/control/saml/acs", headers: [("Content-Type", "application/json")], body: Array(body))
}
