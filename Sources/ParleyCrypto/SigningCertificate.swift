internal import COpenSSL

/// A certificate whose key Parley trusts to sign what it verifies (an identity
/// provider's, `saml2.idpCertificates`): one X.509 certificate in PEM with an RSA or EC
/// key. Checked once, when the destinations file is read; validity dates are not
/// checked (the key is what is trusted, as in SAML metadata).
public enum SigningCertificate {
    /// A PEM larger than this is not one certificate.
    public static let maxPEMBytes = 64 * 1024

    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case notACertificate
        case moreThanOne
        case unsupportedKey

        public var description: String {
            switch self {
            case .notACertificate: "is not a PEM X.509 certificate"
            case .moreThanOne: "holds more than one certificate (list each on its own)"
            case .unsupportedKey: "has a key that is neither RSA nor EC"
            }
        }
    }

    public static func check(pem: String) throws(Problem) {
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty, bytes.count <= maxPEMBytes, let length = Int32(exactly: bytes.count) else { throw .notACertificate }
        let code = bytes.withUnsafeBytes { raw -> Int32 in
            guard let base = raw.baseAddress else { return 0 }
            return c_parley_pem_certificate_key(base.assumingMemoryBound(to: CChar.self), length)
        }
        switch code {
        case 1, 2: return
        case 3: throw .unsupportedKey
        case 4: throw .moreThanOne
        default: throw .notACertificate
        }
    }
}
