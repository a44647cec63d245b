import Foundation
import Testing

/// The walls between the targets and inside the domain, kept up by a test: the domain imports
/// no HTTP module (Hummingbird, HTTPTypes, NIO's HTTP modules), so its rooms answer in domain
/// values and errors and the edge alone speaks HTTP; persistence depends on the model (and the
/// generic support types), never on a room, so a room can change without its repositories.
@Suite struct LayeringTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let domain = root + "/Sources/ParleyDomain"

    /// Every Swift file under `folder`, by its path relative to the domain.
    static func files(under folder: String) throws -> [String] {
        let base = domain + (folder.isEmpty ? "" : "/" + folder)
        guard let walker = FileManager.default.enumerator(atPath: base) else { return [] }
        return walker.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }.map { folder.isEmpty ? $0 : folder + "/" + $0 }
    }

    /// A file's code without its comments' lines: a comment may name what it likes.
    static func code(_ path: String) throws -> String {
        try String(contentsOfFile: domain + "/" + path, encoding: .utf8).split(separator: "\n")
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
    }

    static func isHTTPModule(_ name: String) -> Bool {
        name.wholeMatch(of: /Hummingbird\w*|HTTPTypes\w*|NIOHTTP\w*|NIOHPACK|NIOWebSocket/) != nil
    }

    @Test func noDomainFileImportsAnHTTPModule() throws {
        let files = try Self.files(under: "")
        #expect(files.count > 40, "the scan found the domain's files: \(files.count)")
        var found: [String] = []
        for file in files {
            for match in try Self.code(file).matches(of: /(?m)^\s*(?:@\w+\s+)*(?:(?:public|package|internal)\s+)?import\s+(?:(?:struct|class|enum|protocol|func|var|let)\s+)?(\w+)/) {
                let module = String(match.output.1)
                if Self.isHTTPModule(module) { found.append("\(file) imports \(module)") }
            }
        }
        #expect(found.isEmpty, "\(found.sorted())")
    }

    /// The types the domain's rooms declare (every folder but the model, persistence and support), by name.
    static func roomTypes() throws -> [String: String] {
        var names: [String: String] = [:]
        for file in try files(under: "") where !["Model/", "Persistence/", "Support/"].contains(where: file.hasPrefix) {
            for match in try code(file).matches(of: /(?m)^(?:(?:public|package|internal|private|fileprivate|final) )*(?:struct|class|enum|protocol|actor|typealias) ([A-Z]\w*)/) {
                names[String(match.output.1)] = file
            }
        }
        return names
    }

    @Test func noPersistenceFileNamesARoom() throws {
        let rooms = try Self.roomTypes()
        #expect(rooms.count > 40, "the scan found the rooms' types: \(rooms.count)")
        var found: [String] = []
        for file in try Self.files(under: "Persistence") {
            let code = try Self.code(file)
            for (name, room) in rooms where code.contains(try Regex("\\b\(name)\\b")) {
                found.append("\(file) names \(name) (\(room))")
            }
        }
        #expect(found.isEmpty, "\(found.sorted())")
    }

    /// The scan itself can fail: a file that imports Hummingbird is found.
    @Test func theImportScanFindsAnHTTPImport() {
        let sample = "import Foundation\npackage import Hummingbird\n@preconcurrency import NIOHTTP1\n"
        let modules = sample.matches(of: /(?m)^\s*(?:@\w+\s+)*(?:(?:public|package|internal)\s+)?import\s+(\w+)/).map { String($0.output.1) }
        #expect(modules.filter(Self.isHTTPModule) == ["Hummingbird", "NIOHTTP1"])
    }
}
