import ParleyEncoding
import Foundation
import Logging
import ParleyCrypto
import ParleyTesting
import UpstreamSimulator

let testLogger: Logger = {
    var logger = Logger(label: "simulator-tests")
    logger.logLevel = .critical  // stopping a simulator logs cancellations as errors
    return logger
}()

/// Runs a simulator for one test.
func withSimulator<T>(
    _ configuration: SimulatorConfiguration = .init(), _ body: (_ port: Int, _ state: SimulatorState) async throws -> T
) async throws -> T {
    try await withRunningSimulator(configuration: configuration, logger: testLogger, body)
}

func basicAuthorization(_ user: String = "alice", _ password: String = "wonderland") -> (String, String) {
    ("Authorization", "Basic " + Base64.encode(Array("\(user):\(password)".utf8)))
}

/// The value of cookie `name` among the response's `Set-Cookie` headers.
func setCookie(_ name: String, in response: RawHTTPResponse) -> String? {
    for header in response.headers("Set-Cookie") {
        let first = header.split(separator: ";")[0]
        let parts = first.split(separator: "=", maxSplits: 1)
        if parts.count == 2, parts[0] == name { return String(parts[1]) }
    }
    return nil
}

private let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

func urlEncode(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: unreserved)!
}

func formBody(_ pairs: [(String, String)]) -> [UInt8] {
    Array(pairs.map { "\(urlEncode($0.0))=\(urlEncode($0.1))" }.joined(separator: "&").utf8)
}

func postForm(
    _ port: Int, _ target: String, _ pairs: [(String, String)], headers: [(String, String)] = []
) async throws -> RawHTTPResponse {
    try await RawHTTP.request(
        port: port, method: "POST", target: target,
        headers: [("Content-Type", "application/x-www-form-urlencoded")] + headers, body: formBody(pairs))
}

/// The query parameters of a URL or `Location` value, decoded.
func queryItems(_ url: String) -> [String: String] {
    guard let components = URLComponents(string: url) else { return [:] }
    var out: [String: String] = [:]
    for item in components.queryItems ?? [] { out[item.name] = item.value ?? "" }
    return out
}

/// A fresh PKCE pair (RFC 7636 S256).
func pkcePair() -> (verifier: String, challenge: String) {
    let verifier = SecureRandom.token(byteCount: 48)
    return (verifier, Base64URL.encode(SHA256.hash(Array(verifier.utf8))))
}

/// Signs in at `POST /oauth/authorize` as a browser would and returns the `Location`.
func authorize(
    _ port: Int, clientID: String = "parley-public", redirectURI: String, state: String = "st-1", challenge: String?,
    scope: String? = "read", username: String = "alice", password: String = "wonderland"
) async throws -> RawHTTPResponse {
    var pairs = [("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirectURI), ("state", state)]
    if let challenge { pairs += [("code_challenge", challenge), ("code_challenge_method", "S256")] }
    if let scope { pairs.append(("scope", scope)) }
    pairs += [("username", username), ("password", password)]
    return try await postForm(port, "/oauth/authorize", pairs)
}

/// A code for `parley-public` (PKCE), with the verifier that redeems it.
func obtainCode(_ port: Int, redirectURI: String) async throws -> (code: String, verifier: String) {
    let pkce = pkcePair()
    let response = try await authorize(port, redirectURI: redirectURI, challenge: pkce.challenge)
    guard response.status == 302, let location = response.header("Location"), let code = queryItems(location)["code"] else {
        throw TestFailure("authorize answered \(response.status): \(response.text)")
    }
    return (code, pkce.verifier)
}

func string(_ response: RawHTTPResponse, _ key: String) -> String? {
    response.json?[key] as? String
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
