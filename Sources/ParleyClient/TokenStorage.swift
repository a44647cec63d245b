public import Foundation

#if canImport(Security)
import Security
#endif

/// Where a conversation keeps its registration's client token: the Keychain on Apple
/// platforms, a file or memory elsewhere. The token is the registration's only credential.
public protocol TokenStorage: Sendable {
    func token(for key: String) async throws -> String?
    func setToken(_ token: String, for key: String) async throws
    func removeToken(for key: String) async throws
}

/// Tokens in memory, gone with the process (tests, short-lived tools).
public actor MemoryTokenStorage: TokenStorage {
    private var tokens: [String: String] = [:]

    public init() {}

    public func token(for key: String) -> String? { tokens[key] }
    public func setToken(_ token: String, for key: String) { tokens[key] = token }
    public func removeToken(for key: String) { tokens[key] = nil }
}

/// Tokens in files of a directory only its owner may read (0700, each file 0600), one per key.
public struct FileTokenStorage: TokenStorage {
    public let directory: URL

    public init(directory: URL) { self.directory = directory }

    private func file(_ key: String) -> URL {
        // Keys name a Parley and a destination; the file name keeps letters, digits, '-' and '.'.
        let name = String(key.unicodeScalars.map { scalar -> Character in
            CharacterSet.alphanumerics.contains(scalar) || scalar == "-" || scalar == "." ? Character(scalar) : "_"
        })
        return directory.appendingPathComponent(name + ".token")
    }

    public func token(for key: String) async throws -> String? {
        guard let data = FileManager.default.contents(atPath: file(key).path) else { return nil }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : token
    }

    public func setToken(_ token: String, for key: String) async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let target = file(key)
        let temporary = directory.appendingPathComponent("." + UUID().uuidString)
        guard FileManager.default.createFile(atPath: temporary.path, contents: Data(token.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown)
        }
        _ = try? FileManager.default.removeItem(at: target)
        try FileManager.default.moveItem(at: temporary, to: target)
    }

    public func removeToken(for key: String) async throws {
        if FileManager.default.fileExists(atPath: file(key).path) { try FileManager.default.removeItem(at: file(key)) }
    }
}

#if canImport(Security)
/// Tokens in the Keychain (a generic password per key), readable after the device's first unlock.
public struct KeychainTokenStorage: TokenStorage {
    public let service: String

    public init(service: String = "parley") { self.service = service }

    private func query(_ key: String) -> [String: Any] {
        [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service, kSecAttrAccount as String: key]
    }

    public func token(for key: String) async throws -> String? {
        var query = query(key)
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var item: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &item)
        guard status != errSecItemNotFound else { return nil }
        guard status == errSecSuccess, let data = item as? Data else { throw KeychainError(status: status) }
        return String(decoding: data, as: UTF8.self)
    }

    public func setToken(_ token: String, for key: String) async throws {
        try await removeToken(for: key)
        var item = query(key)
        item[kSecValueData as String] = Data(token.utf8)
        item[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
        let status = SecItemAdd(item as CFDictionary, nil)
        guard status == errSecSuccess else { throw KeychainError(status: status) }
    }

    public func removeToken(for key: String) async throws {
        let status = SecItemDelete(query(key) as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else { throw KeychainError(status: status) }
    }

    public struct KeychainError: Error, Sendable { public let status: OSStatus }
}
#endif
