internal import COpenSSL

/// A TLS client identity in the form libcurl loads without key derivation: the
/// certificate (then its chain) and the private key, both PEM. Made once, from an
/// uploaded PKCS#12, at registration; sealed at rest like every other secret.
public struct ClientIdentity: Sendable, Equatable, Codable {
    public var certificatePEM: [UInt8]
    public var privateKeyPEM: [UInt8]

    public init(certificatePEM: [UInt8], privateKeyPEM: [UInt8]) {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
    }

    /// Key-derivation iterations a PKCS#12 may ask for (MAC and each encryption);
    /// common exports use 2,048 to 10,000.
    public static let maxIterations = 200_000
    /// A PKCS#12 larger than this is not a client certificate.
    public static let maxPKCS12Bytes = 64 * 1024

    public enum ImportError: Error, Sendable, Equatable, CustomStringConvertible {
        case notPKCS12
        case tooMuchWork
        case wrongPassword
        case incomplete
        case keyMismatch
        case notCurrentlyValid

        public var description: String {
            switch self {
            case .notPKCS12: "is not a PKCS#12 file"
            case .tooMuchWork: "asks for more key-derivation work than Parley allows (at most \(ClientIdentity.maxIterations) iterations)"
            case .wrongPassword: "cannot be opened with the given password"
            case .incomplete: "does not hold both a certificate and its private key"
            case .keyMismatch: "holds a private key that does not belong to its certificate"
            case .notCurrentlyValid: "holds a certificate that is expired or not yet valid"
            }
        }
    }

    /// Opens `pkcs12` (DER) with `password`, checking every iteration count before any key
    /// derivation runs. Blocking CPU work (bounded): call it off the event loops.
    public static func importPKCS12(_ pkcs12: [UInt8], password: String?) throws(ImportError) -> ClientIdentity {
        guard !pkcs12.isEmpty, pkcs12.count <= maxPKCS12Bytes else { throw .notPKCS12 }
        guard let certificates = BIO_new(BIO_s_mem()) else { throw .notPKCS12 }
        defer { BIO_free(certificates) }
        guard let key = BIO_new(BIO_s_mem()) else { throw .notPKCS12 }
        defer { BIO_free(key) }
        let code = pkcs12.withUnsafeBufferPointer { der -> Int32 in
            c_parley_pkcs12_to_pem(der.baseAddress, der.count, password, maxIterations, certificates, key)
        }
        switch code {
        case 0: break
        case 2: throw .tooMuchWork
        case 3: throw .wrongPassword
        case 4: throw .incomplete
        case 5: throw .keyMismatch
        case 6: throw .notCurrentlyValid
        default: throw .notPKCS12
        }
        let identity = ClientIdentity(certificatePEM: Self.contents(of: certificates), privateKeyPEM: Self.contents(of: key))
        guard !identity.certificatePEM.isEmpty, !identity.privateKeyPEM.isEmpty else { throw .incomplete }
        return identity
    }

    private static func contents(of bio: OpaquePointer) -> [UInt8] {
        var data: UnsafeMutablePointer<CChar>?
        let length = c_parley_bio_mem_data(bio, &data)
        guard length > 0, let data else { return [] }
        return data.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
    }
}
