import Foundation
import Hummingbird

/// `POST /control/identity-token` input: who the token names and for whom.
private struct IdentityTokenRequest: Decodable {
    var sub: String
    /// One audience or several.
    var aud: Audience
    /// Default: the simulator's base URL (`idpBaseURL`, else `http://127.0.0.1:<port>`).
    var iss: String?
    /// Seconds since 1970; default ten minutes from now.
    var exp: Double?
    var nbf: Double?
    /// Seconds since 1970; default now. `0` leaves `iat` out.
    var iat: Double?
    var email: String?
    /// Further string claims (`preferred_username`, `upn`, …).
    var claims: [String: String]?
    /// `RS256` (default), `PS256` or `ES256`.
    var alg: String?
    /// The header's `typ` (`at+jwt` for an RFC 9068 access token); absent by default.
    var typ: String?
    /// Further claims of any JSON type (`act`, a `scope` list, …), written as given.
    var jsonClaims: [String: JSONClaim]?

    enum Audience: Decodable {
        case one(String)
        case many([String])

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let one = try? container.decode(String.self) {
                self = .one(one)
            } else {
                self = .many(try container.decode([String].self))
            }
        }

        var json: Any {
            switch self {
            case .one(let value): value
            case .many(let values): values
            }
        }
    }
}

/// Any JSON value, read so that it can be written again.
private struct JSONClaim: Decodable {
    let value: Any

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let v = try? c.decode(Bool.self) {
            value = v
        } else if let v = try? c.decode(Double.self) {
            value = Int(exactly: v) ?? v
        } else if let v = try? c.decode(String.self) {
            value = v
        } else if let v = try? c.decode([JSONClaim].self) {
            value = v.map(\.value)
        } else {
            value = try c.decode([String: JSONClaim].self).mapValues(\.value)
        }
    }
}

private struct IdentityTokenAnswer: Encodable {
    let token: String
}

/// The demo identity provider, for registrations with a verified user (`identityToken`) in the
/// demo and the live tests. List it in Parley's destinations file as
/// `identityProviders: [{issuer: <simulator URL>, jwksUri: <simulator URL>/idp/jwks, audiences: [...]}]`.
///
/// - `GET /idp/jwks` — its public keys as a JWK Set: an RSA key (`kid` `sim-rsa-1`, RS256 and
///   PS256) and a P-256 key (`kid` `sim-ec-1`, ES256), made when first asked for.
/// - `POST /control/identity-token` with JSON `{"sub", "aud", "iss"?, "exp"?, "nbf"?, "iat"?, "email"?,
///   "claims"?, "jsonClaims"?, "alg"?, "typ"?}` — `{"token": "<JWT>"}` signed with those keys (`typ`
///   `at+jwt` makes an RFC 9068 access token of it; `jsonClaims` adds `act`, `client_id`, …); `iss` defaults to the
///   simulator's base URL, `exp` to ten minutes from now, `iat` to now (`0` leaves it out). `400` for a body that is
///   not that, or an `alg` other than RS256, PS256, ES256.
func addIdentityProviderRoutes(to router: Router<BasicRequestContext>, configuration: SimulatorConfiguration, state: SimulatorState) {
    router.get("/idp/jwks") { _, _ -> Response in
        state.record("GET /idp/jwks")
        guard let keys = state.identityProvider else { return SimHTTP.text("no signing keys", status: .internalServerError) }
        return Response(
            status: .ok, headers: [.contentType: "application/jwk-set+json", .cacheControl: "max-age=300"],
            body: .init(byteBuffer: ByteBuffer(bytes: keys.jwks)))
    }

    router.post("/control/identity-token") { request, _ -> Response in
        state.record("POST /control/identity-token")
        let body = try await request.body.collect(upTo: 64 * 1024)
        guard let input = try? JSONDecoder().decode(IdentityTokenRequest.self, from: Data(buffer: body)) else {
            return SimHTTP.text(#"expected JSON {"sub", "aud", "iss"?, "exp"?, "nbf"?, "email"?, "claims"?, "alg"?}"#, status: .badRequest)
        }
        guard let algorithm = IdentityIssuer.Algorithm(rawValue: input.alg ?? "RS256") else {
            return SimHTTP.text("alg must be RS256, PS256 or ES256", status: .badRequest)
        }
        guard let keys = state.identityProvider else { return SimHTTP.text("no signing keys", status: .internalServerError) }
        let now = Date().timeIntervalSince1970.rounded(.down)
        var claims: [String: Any] = [:]
        for (name, value) in input.claims ?? [:] { claims[name] = value }
        for (name, value) in input.jsonClaims ?? [:] { claims[name] = value.value }
        claims["iss"] = input.iss ?? identityProviderIssuer(configuration, state)
        claims["sub"] = input.sub
        claims["aud"] = input.aud.json
        // Whole seconds as integers, as issuers write them; anything else as given.
        func time(_ value: Double) -> Any { Int(exactly: value) ?? value }
        if input.iat != 0 { claims["iat"] = time((input.iat ?? now).rounded(.down)) }
        claims["exp"] = time(input.exp ?? now + 600)
        if let nbf = input.nbf { claims["nbf"] = time(nbf) }
        if let email = input.email { claims["email"] = email }
        do {
            let header: [String: Any] = input.typ.map { ["typ": $0] } ?? [:]
            return SimHTTP.json(IdentityTokenAnswer(token: try keys.token(claims, algorithm: algorithm, header: header)))
        } catch {
            return SimHTTP.text("signing failed", status: .internalServerError)
        }
    }
}

/// The demo identity provider's issuer: `idpBaseURL`, else the simulator's own address.
func identityProviderIssuer(_ configuration: SimulatorConfiguration, _ state: SimulatorState) -> String {
    configuration.idpBaseURL ?? "http://127.0.0.1:\(state.port ?? 0)"
}
