import Foundation
import Testing

/// The walls inside ParleyServer, kept up by a test: persistence depends on the model (and the
/// generic support types), never on a room, so a room can change without its repositories.
@Suite struct LayeringTests {
    static let server = packageRoot + "/Sources/ParleyServer"

    /// The types a folder declares, by name.
    static func declaredTypes(in folder: String) throws -> [String: String] {
        var names: [String: String] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: server + "/" + folder) where file.hasSuffix(".swift") {
            let text = try String(contentsOfFile: server + "/" + folder + "/" + file, encoding: .utf8)
            for match in text.matches(of: /(?m)^(?:(?:public|package|internal|private|fileprivate|final) )*(?:struct|class|enum|protocol|actor|typealias) ([A-Z]\w*)/) {
                names[String(match.output.1)] = file
            }
        }
        return names
    }

    @Test func noPersistenceFileNamesARoom() throws {
        let rooms = try Self.declaredTypes(in: "Rooms")
        #expect(rooms.count > 20, "the scan found the rooms' types: \(rooms.count)")
        var found: [String] = []
        let folder = Self.server + "/Persistence"
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".swift") {
            // Code only: a comment may say which room uses a repository.
            let code = try String(contentsOfFile: folder + "/" + file, encoding: .utf8).split(separator: "\n")
                .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
            for (name, room) in rooms where code.contains(try Regex("\\b\(name)\\b")) {
                found.append("\(file) names \(name) (Rooms/\(room))")
            }
        }
        #expect(found.isEmpty, "\(found.sorted())")
    }
}
