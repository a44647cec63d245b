import Foundation
import Testing

/// SwiftPM drops the `-D` flags pkg-config gives for xmlsec1-openssl, so the shim header
/// defines them itself. They decide the layout of xmlsec's structs (`XMLSEC_NO_SIZE_T`),
/// so they must be the ones this machine's library was built with.
@Suite struct ShimFlagsTests {
    @Test func theShimDefinesWhatPkgConfigSays() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["pkg-config", "--cflags", "xmlsec1-openssl"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let flags = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)

        let shim = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/CXMLSec/shim.h")
        let header = try String(contentsOf: shim, encoding: .utf8)
        let defines = flags.split(separator: " ").filter { $0.hasPrefix("-D") }.map { $0.dropFirst(2).trimmingCharacters(in: .whitespacesAndNewlines) }
        #expect(defines.contains { $0.hasPrefix("XMLSEC_CRYPTO_OPENSSL") }, "pkg-config gave: \(flags)")
        for define in defines {
            let parts = define.split(separator: "=", maxSplits: 1).map(String.init)
            let line = "#define \(parts[0]) \(parts.count > 1 ? parts[1] : "1")"
            #expect(header.contains(line + "\n"), "Sources/CXMLSec/shim.h lacks `\(line)` (pkg-config --cflags xmlsec1-openssl)")
        }
    }
}
