import Crypto
import CryptoExtras
import Foundation
import ParleyEncoding

/// The demo identity provider's signing keys, made when it starts, and JWTs signed with them:
/// an RSA key (RS256 and PS256; published without `alg`) and a P-256 key (ES256). Signs with
/// swift-crypto, so that Parley's verifier (jwt-kit) is checked against another implementation.
/// Tests use it directly to sign whatever header and claims they need.
public final class IdentityIssuer: Sendable {
    public enum Algorithm: String, Sendable, CaseIterable {
        case rs256 = "RS256"
        case ps256 = "PS256"
        case es256 = "ES256"
    }

    public static let rsaKeyID = "sim-rsa-1"
    public static let ecKeyID = "sim-ec-1"

    private let rsa: _RSA.Signing.PrivateKey
    private let ec: P256.Signing.PrivateKey

    /// New keys (RSA 2048, P-256).
    public init() throws {
        rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        ec = P256.Signing.PrivateKey()
    }

    public static func keyID(for algorithm: Algorithm) -> String { algorithm == .es256 ? ecKeyID : rsaKeyID }

    /// The public keys as a JWK Set (RFC 7517), JSON.
    public var jwks: [UInt8] { Self.json(["keys": publicJWKs]) }

    /// Each public key as a JWK object.
    public var publicJWKs: [[String: Any]] {
        var keys: [[String: Any]] = []
        if let primitives = try? rsa.publicKey.getKeyPrimitives() {
            keys.append([
                "kty": "RSA", "use": "sig", "kid": Self.rsaKeyID, "n": Base64URL.encode(Array(primitives.modulus)),
                "e": Base64URL.encode(Array(primitives.publicExponent)),
            ])
        }
        let point = Array(ec.publicKey.rawRepresentation)  // x ‖ y
        keys.append([
            "kty": "EC", "use": "sig", "alg": "ES256", "kid": Self.ecKeyID, "crv": "P-256", "x": Base64URL.encode(Array(point.prefix(32))),
            "y": Base64URL.encode(Array(point.suffix(32))),
        ])
        return keys
    }

    /// The RSA public key as PEM (what an algorithm-confusion attack uses as an HMAC secret).
    public var rsaPublicKeyPEM: String { rsa.publicKey.pemRepresentation }

    /// A compact JWS of `claims` signed with `algorithm`; the header is `alg`, `typ: JWT` and the
    /// key's `kid`, with `header` merged over it (a value of `NSNull()` removes a member).
    public func token(_ claims: [String: Any], algorithm: Algorithm = .rs256, header: [String: Any] = [:]) throws -> String {
        var fields: [String: Any] = ["alg": algorithm.rawValue, "typ": "JWT", "kid": Self.keyID(for: algorithm)]
        for (name, value) in header { fields[name] = value is NSNull ? nil : value }
        let input = Self.encode(fields) + "." + Self.encode(claims)
        return input + "." + Base64URL.encode(try signature(Array(input.utf8), algorithm: algorithm))
    }

    /// The signature of `input` with `algorithm`'s key.
    public func signature(_ input: [UInt8], algorithm: Algorithm) throws -> [UInt8] {
        switch algorithm {
        case .rs256: Array(try rsa.signature(for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5).rawRepresentation)
        case .ps256: Array(try rsa.signature(for: SHA256.hash(data: input), padding: .PSS).rawRepresentation)
        case .es256: Array(try ec.signature(for: SHA256.hash(data: input)).rawRepresentation)
        }
    }

    /// The claims of an RS256 token whose signature verifies with the RSA key its `kid` names in
    /// the JWK Set `jwks` (what a relying party does with `GET /oauth/jwks`); nil otherwise. For
    /// tests of the simulator: Parley's own verifier is jwt-kit.
    public static func verifiedClaims(_ token: String, jwks: [UInt8]) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let headerBytes = Base64.decode(parts[0]), let claimBytes = Base64.decode(parts[1]),
            let signature = Base64.decode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: Data(claimBytes))) as? [String: Any],
            header["alg"] as? String == "RS256", let kid = header["kid"] as? String,
            let set = (try? JSONSerialization.jsonObject(with: Data(jwks))) as? [String: Any],
            let keys = set["keys"] as? [[String: Any]],
            let jwk = keys.first(where: { $0["kid"] as? String == kid && $0["kty"] as? String == "RSA" }),
            let n = (jwk["n"] as? String).flatMap(Base64.decode), let e = (jwk["e"] as? String).flatMap(Base64.decode),
            let key = try? _RSA.Signing.PublicKey(n: n, e: e)
        else { return nil }
        let input = Array((parts[0] + "." + parts[1]).utf8)
        let valid = key.isValidSignature(
            _RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5)
        return valid ? claims : nil
    }

    /// Base64url of the JSON of `object`.
    public static func encode(_ object: [String: Any]) -> String { Base64URL.encode(json(object)) }

    static func json(_ object: Any) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8))
    }
}
