import Conversation
import CurlTransport
import Foundation
import ParleyCrypto
import ParleyTesting
import Testing
import UpstreamSimulator

/// A client certificate is opened once (registration, destinations file) and stored as
/// PEM; every PKCS#12 problem is found then, with bounded key-derivation work.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ClientIdentityTests {
    @Test func aPKCS12BecomesPEMThatCurlPresentsWithoutItsPassword() async throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let identity = try ClientIdentity.importPKCS12(certificates.clientPKCS12, password: certificates.clientPKCS12Password)
        #expect(String(decoding: identity.certificatePEM, as: UTF8.self).hasPrefix("-----BEGIN CERTIFICATE-----"))
        #expect(String(decoding: identity.privateKeyPEM, as: UTF8.self).hasPrefix("-----BEGIN PRIVATE KEY-----"))

        try await withRunningSimulator(logger: Fixtures.simulatorLogger) { port, _ in
            let frontend = try await TLSFrontend.start(certificates: certificates, upstreamPort: port)
            defer { frontend.remove() }
            let transport = Fixtures.transport()
            defer { transport.shutdown() }
            var tls = TLSOptions(caPEM: certificates.caPEM)
            tls.clientCertificatePEM = identity.certificatePEM
            tls.clientKeyPEM = identity.privateKeyPEM
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(frontend.baseURL)/echo/tls", tls: tls))
            #expect(response.status == 200)
            let echo = try await Fixtures.decode(Fixtures.Echo.self, response)
            #expect(echo.headers["x-client-verify"] == ["SUCCESS"])
        }
    }

    @Test func unusableFilesAreRefusedWithTheirReason() throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        #expect(throws: ClientIdentity.ImportError.wrongPassword) {
            try ClientIdentity.importPKCS12(certificates.clientPKCS12, password: "wrong")
        }
        #expect(throws: ClientIdentity.ImportError.notPKCS12) {
            try ClientIdentity.importPKCS12(Array("not a certificate".utf8), password: nil)
        }
        #expect(throws: ClientIdentity.ImportError.notPKCS12) {
            try ClientIdentity.importPKCS12([], password: nil)
        }
        // Truncations of a real file: every prefix is refused, none traps.
        let bytes = certificates.clientPKCS12
        for length in stride(from: 1, to: bytes.count, by: max(1, bytes.count / 64)) {
            #expect(throws: ClientIdentity.ImportError.self) {
                try ClientIdentity.importPKCS12(Array(bytes.prefix(length)), password: certificates.clientPKCS12Password)
            }
        }
        // Only a certificate, no key.
        let certificateOnly = try Self.export(certificates, extra: ["-nokeys"], name: "nokey.p12")
        #expect(throws: ClientIdentity.ImportError.incomplete) {
            try ClientIdentity.importPKCS12(certificateOnly, password: "pw")
        }
    }

    @Test func aFileAskingForTooMuchKeyDerivationIsRefusedBeforeAnyIsDone() throws {
        let certificates = try TestCertificates.generate()
        defer { certificates.remove() }
        let expensive = try Self.export(certificates, extra: ["-iter", "\(ClientIdentity.maxIterations + 1)"], name: "slow.p12")
        // Refused from the counts alone: even the right password is never tried.
        #expect(throws: ClientIdentity.ImportError.tooMuchWork) {
            try ClientIdentity.importPKCS12(expensive, password: "pw")
        }
        #expect(throws: ClientIdentity.ImportError.tooMuchWork) {
            try ClientIdentity.importPKCS12(expensive, password: "wrong")
        }
        let ordinary = try Self.export(certificates, extra: ["-iter", "2048"], name: "ok.p12")
        #expect(try ClientIdentity.importPKCS12(ordinary, password: "pw").privateKeyPEM.isEmpty == false)
    }

    static func export(_ certificates: TestCertificates, extra: [String], name: String) throws -> [UInt8] {
        let status = try Spawn.runAndWait(
            [
                "/usr/bin/openssl", "pkcs12", "-export", "-inkey", "client.key", "-in", "client.crt", "-out", name, "-passout", "pass:pw",
            ] + extra, output: nil, directory: certificates.directory)
        guard status == 0, let data = FileManager.default.contents(atPath: certificates.directory + "/" + name) else {
            throw TestHarnessError("openssl pkcs12 -export failed (\(status))")
        }
        return Array(data)
    }
}
