import Synchronization

/// Identifiers for logs and correlation (request ids, conversation ids): 16 hex digits,
/// a random per-process prefix and a counter, so they are unique across instances
/// without a system call or a cryptographic generator per request. Not secrets.
public enum LocalID {
    private static let prefix = UInt64.random(in: 0...UInt64(UInt32.max))
    private static let counter = Atomic<UInt64>(0)

    public static func next() -> String {
        let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
        let value = prefix << 32 | (n & 0xFFFF_FFFF)
        return String(unsafeUninitializedCapacity: 16) { buffer in
            let digits: StaticString = "0123456789abcdef"
            for i in 0..<16 {
                let nibble = Int((value >> UInt64(60 - 4 * i)) & 0xF)
                buffer[i] = digits.withUTF8Buffer { $0[nibble] }
            }
            return 16
        }
    }
}
