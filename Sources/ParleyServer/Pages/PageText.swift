import Foundation
import ParleyDomain

/// The languages Parley's pages speak: a message catalog each (`messages.<code>.json`, compiled
/// into the binary by scripts/embed-resources.sh). English is complete and the fallback.
enum PageLanguage: String, CaseIterable, Sendable {
    case en, de

    static let fallback = PageLanguage.en

    /// The language an `Accept-Language` header (RFC 9110 §12.5.4) prefers among those Parley
    /// speaks: the highest `q` wins, the earlier range on a tie; a range matches its language
    /// (`de`), a sub-tag of it (`de-CH`) or anything (`*`, the fallback); `q=0` refuses. A header
    /// that says nothing usable, or is absurdly long, gets the fallback.
    static func negotiated(_ header: String?) -> PageLanguage {
        guard let header, header.utf8.count <= 1024 else { return fallback }
        var best: (language: PageLanguage, quality: Double)?
        for range in header.split(separator: ",").prefix(32) {
            let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let tag = parts.first?.lowercased(), !tag.isEmpty else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() where parameter.lowercased().hasPrefix("q=") {
                guard let value = Double(parameter.dropFirst(2)), value.isFinite, value >= 0, value <= 1 else { quality = 0; break }
                quality = value
            }
            guard quality > 0 else { continue }
            let primary = tag.split(separator: "-").first.map(String.init) ?? tag
            let language = tag == "*" ? fallback : PageLanguage(rawValue: primary)
            guard let language else { continue }
            if best == nil || quality > (best?.quality ?? 0) { best = (language, quality) }
        }
        return best?.language ?? fallback
    }
}


/// The message catalogs: every text of every page, by key, per language. A text's `{name}`
/// placeholders are filled with values the template engine escapes afterwards.
struct PageCatalogs: Sendable {
    let texts: [PageLanguage: [String: String]]

    /// The catalogs compiled into the binary. A catalog that does not parse leaves its language
    /// empty (its texts then come from English); the catalog tests fail long before that ships.
    static let embedded = PageCatalogs(
        texts: Dictionary(
            uniqueKeysWithValues: PageLanguage.allCases.map { language in
                let json = EmbeddedPages.catalogs.first { $0.language == language.rawValue }?.json ?? "{}"
                return (language, (try? JSONDecoder().decode([String: String].self, from: Data(json.utf8))) ?? [:])
            }))

    /// The text of `key` in `language` (English when that catalog lacks it; the key itself when
    /// English does too), its placeholders filled from `values`.
    func text(_ key: String, _ language: PageLanguage, _ values: [String: String] = [:]) -> String {
        Self.filled(texts[language]?[key] ?? texts[.fallback]?[key] ?? key, values)
    }

    /// `template` with each `{name}` replaced by its value, in one pass: a value that itself
    /// holds `{…}` (a display name is the operator's text) stays as it is.
    static func filled(_ template: String, _ values: [String: String]) -> String {
        guard !values.isEmpty else { return template }
        var out = ""
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{") {
            out += rest[..<open]
            let after = rest[rest.index(after: open)...]
            if let close = after.firstIndex(of: "}"), let value = values[String(after[..<close])] {
                out += value
                rest = after[after.index(after: close)...]
            } else {
                out += "{"
                rest = after
            }
        }
        return out + rest
    }

    func age(_ age: PageAge, _ language: PageLanguage) -> String {
        text(age.key, language, ["count": String(age.count)])
    }
}
