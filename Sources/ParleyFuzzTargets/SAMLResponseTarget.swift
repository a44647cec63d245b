import ParleyEncoding
import SAMLIdentity

extension Targets {
    /// The certificate of the SimpleSAMLphp identity provider whose response is in
    /// Tests/Fixtures/saml/captured (its key was thrown away): every seed it signed names
    /// `alice`, so nothing the fuzzer makes may verify as anyone else.
    static let samlCertificate = """
        -----BEGIN CERTIFICATE-----
        MIIDFTCCAf2gAwIBAgIUXnYxD6BRTfKi3lOO4SunAn+9T/IwDQYJKoZIhvcNAQEL
        BQAwGjEYMBYGA1UEAwwPcGFybGV5LXRlc3QtaWRwMB4XDTI2MTEyNjA4MDAyOVoX
        DTI2MTIyNjA4MDAyOVowGjEYMBYGA1UEAwwPcGFybGV5LXRlc3QtaWRwMIIBIjAN
        BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAuW9fHvYotPktx3suKAxuDnlwKctB
        ylju91Ngi2aH+KKjfHR/B+MLTD4ay2WHYgN5tdB0Pg2NR3DCG5O5MznDBRwSd7hK
        MAp62YhmsY4qEuUsQwdZ0ztkPqXujQNZeVc9iqPbsceIqshkyVjtn4q//QSZ2M/r
        pmvTVi5Kyr3nK+k0IoVxHLz8wj/nLUH0rLzp9Y9feUjPYXXGBhTBIq/3MVX9Txqj
        UgmHgLmizJYBpUJNBAQmu3STFYZRVnPAHYdfX80UyS9Y4gNZg8n7XY85irke9tpW
        JzpDLzRPcCnM20UP9KTHips0l0rdse22XEE+JUvjsCmuJ3z+N/maKQSoIwIDAQAB
        o1MwUTAdBgNVHQ4EFgQUlJFubZILdEWgc35MyVLkW6tLVOQwHwYDVR0jBBgwFoAU
        lJFubZILdEWgc35MyVLkW6tLVOQwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0B
        AQsFAAOCAQEATiqh120R67Cu4tqndi+1SWv/gnsvQWsW4AE9gbOiiilqvyXRuwBH
        zjgGZXWtI6r7VNdjYGKElS3BrphoGzJywmeQM48B75XrKFSuj0/TM0dGMKRNb2/F
        UR1Gv6NW+MNCYJe9PoZlG1eM8Ww1TR4BussuIwTyYuRuoTsHVFIvYbgNP8Fs57wZ
        YAS9WXXaYMkm6N5n9qpBg8LeVwmKUe6hrkdQs3vMNfE3J5TzYvlX6gZa7o5dbfpT
        lzYXk3QN9sgd4yudsxp+lve9PgyNlEik6jONI2fxNCx1TT+afGICzggYa9eo65F9
        DHa7Hacwy/WRYdokgzt4bd6oOwhOHBgMIg==
        -----END CERTIFICATE-----
        """
    static let samlSigned = SAMLSignedInIdentity(
        issuer: "http://127.0.0.1:38921/saml2/idp/metadata.php", nameID: "alice",
        nameIDFormat: "urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified"
    )

    /// The decoded SAMLResponse (XML bytes), base64-encoded as the form carries it, read
    /// trusting the captured IdP's certificate. A "yes" must be the identity that IdP
    /// signed, never one the input wrapped, moved or changed.
    static func samlResponse(_ input: [UInt8]) -> [String] {
        switch SAMLIdentityReader.read(samlResponse: Base64.encode(input), trusting: [samlCertificate]) {
        case .success(let identity):
            return identity == samlSigned ? [] : ["a SAMLResponse verified as \(identity.nameID.prefix(40)) from \(identity.issuer.prefix(60))"]
        case .failure(let error):
            return error.description.contains("alice") ? ["a refusal carries the document"] : []
        }
    }
}
