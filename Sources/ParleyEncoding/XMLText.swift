/// Text for XML 1.0 documents Parley writes (SAML assertions, SAML metadata).
public enum XMLText {
    /// A text or attribute value: the five XML specials escaped; control characters (which
    /// XML 1.0 cannot carry) and the noncharacters U+FFFE and U+FFFF dropped.
    public static func escaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            default:
                if scalar.value >= 0x20, scalar.value != 0x7F, scalar.value != 0xFFFE, scalar.value != 0xFFFF { out.unicodeScalars.append(scalar) }
            }
        }
        return out
    }
}
