import AuthFlows
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ParleyCrypto
import ParleyEncoding
import ParleyDomain

/// A destination's logo file, read and checked at start (`branding.logo`).
struct PageLogo: Sendable, Equatable {
    let bytes: [UInt8]
    let contentType: String
    let fileExtension: String

    /// The file at `path` when it is a PNG or JPEG image of at most `maxLogoBytes`; else why not.
    static func read(path: String) -> Result<PageLogo, PageLogoProblem> {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path), let size = attributes[.size] as? Int else {
            return .failure(PageLogoProblem("cannot read '\(path)'"))
        }
        guard size <= DestinationSpec.maxLogoBytes else {
            return .failure(PageLogoProblem("'\(path)' is \(size) bytes; a logo is at most \(DestinationSpec.maxLogoBytes)"))
        }
        guard let data = FileManager.default.contents(atPath: path) else { return .failure(PageLogoProblem("cannot read '\(path)'")) }
        return make(Array(data)).mapError { PageLogoProblem("'\(path)' \($0.description)") }
    }

    /// The image in `bytes`, recognised by its signature (never by a file name).
    static func make(_ bytes: [UInt8]) -> Result<PageLogo, PageLogoProblem> {
        guard bytes.count <= DestinationSpec.maxLogoBytes else { return .failure(PageLogoProblem("is larger than \(DestinationSpec.maxLogoBytes) bytes")) }
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            return .success(PageLogo(bytes: bytes, contentType: "image/png", fileExtension: "png"))
        }
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) {
            return .success(PageLogo(bytes: bytes, contentType: "image/jpeg", fileExtension: "jpg"))
        }
        return .failure(PageLogoProblem("is not a PNG or JPEG image"))
    }
}

struct PageLogoProblem: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The files Parley's pages link to, served by `GET /pages/{file}`: one stylesheet (the base
/// rules and one `.brand-N` rule per destination with an accent colour) and each destination's
/// logo. Every file is named by its content's hash, so it can be cached for good and a change
/// is a new name; the pages' `style-src 'self'` and `img-src 'self'` allow nothing else.
struct PageAssets: Sendable {
    struct File: Sendable {
        let bytes: ByteBuffer
        let contentType: String
    }

    /// By file name (`style-<hash>.css`, `logo-<hash>.png`).
    let files: [String: File]
    /// `/pages/style-<hash>.css`.
    let stylesheetPath: String
    private let logos: [String: String]
    private let brands: [String: String]

    /// The assets for these destinations, with the logos read at start (by destination name).
    init(destinations: [Destination], logos: [String: PageLogo] = [:]) {
        var css = EmbeddedPages.stylesheet
        var brands: [String: String] = [:]
        for (index, destination) in destinations.filter({ $0.branding?.accent != nil }).sorted(by: { $0.name < $1.name }).enumerated() {
            guard let accent = destination.branding?.accent, let rgb = Self.rgb(accent) else { continue }
            let name = "brand-\(index + 1)"
            brands[destination.name] = name
            css += ".\(name) { --accent: \(accent); --on-accent: \(Self.onAccent(rgb)); }\n"
        }
        var files: [String: File] = [:]
        let stylesheet = "style-\(Self.digest(Array(css.utf8))).css"
        files[stylesheet] = File(bytes: ByteBuffer(string: css), contentType: "text/css; charset=utf-8")
        var logoPaths: [String: String] = [:]
        for (destination, logo) in logos {
            let name = "logo-\(Self.digest(logo.bytes)).\(logo.fileExtension)"
            files[name] = File(bytes: ByteBuffer(bytes: logo.bytes), contentType: logo.contentType)
            logoPaths[destination] = "/pages/" + name
        }
        self.files = files
        stylesheetPath = "/pages/" + stylesheet
        self.logos = logoPaths
        self.brands = brands
    }

    func logoPath(of destination: String) -> String? { logos[destination] }
    func brandClass(of destination: String) -> String? { brands[destination] }

    /// `GET /pages/{file}`: the file, cacheable for a year (its name changes with it), or `404`.
    @Sendable func serve(_ request: Request, context: ParleyRequestContext) async throws -> Response {
        guard let name = context.parameters.get("file"), let file = files[name] else { return Problem.notFound().render() }
        let headers: HTTPFields = [
            .contentType: file.contentType,
            .cacheControl: "public, max-age=31536000, immutable",
            .xContentTypeOptions: "nosniff",
            .contentSecurityPolicy: "default-src 'none'",
            .crossOriginResourcePolicy: "same-origin",
        ]
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: request.method == .head ? ByteBuffer() : file.bytes))
    }

    /// The logos the destinations' `branding.logo` name, read; every file that is missing, too
    /// large or not an image is a problem that stops the start.
    static func readLogos(_ destinations: [Destination]) -> (logos: [String: PageLogo], problems: [String]) {
        var logos: [String: PageLogo] = [:]
        var problems: [String] = []
        for destination in destinations.sorted(by: { $0.name < $1.name }) {
            guard let path = destination.branding?.logo else { continue }
            switch PageLogo.read(path: path) {
            case .success(let logo): logos[destination.name] = logo
            case .failure(let problem): problems.append("destination '\(destination.name)': branding.logo \(problem)")
            }
        }
        return (logos, problems)
    }

    /// The first 16 hex digits of the SHA-256 of `bytes`.
    static func digest(_ bytes: [UInt8]) -> String { String(Hex.encode(SHA256.hash(bytes)).prefix(16)) }

    static func rgb(_ colour: String) -> (Double, Double, Double)? {
        guard colour.hasPrefix("#"), let bytes = Hex.decode(String(colour.dropFirst())), bytes.count == 3 else { return nil }
        return (Double(bytes[0]) / 255, Double(bytes[1]) / 255, Double(bytes[2]) / 255)
    }

    /// The text colour on an accent background: white or near-black, whichever contrasts more
    /// (WCAG 2 relative luminance), so a button's label stays readable in any brand colour.
    static func onAccent(_ rgb: (Double, Double, Double)) -> String {
        func linear(_ c: Double) -> Double { c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4) }
        let luminance = 0.2126 * linear(rgb.0) + 0.7152 * linear(rgb.1) + 0.0722 * linear(rgb.2)
        let dark = linear(0x11 / 255.0)  // #111111, a grey: its luminance is its linear value
        let withWhite = 1.05 / (luminance + 0.05)
        let withDark = (luminance + 0.05) / (dark + 0.05)
        return withWhite >= withDark ? "#ffffff" : "#111111"
    }
}
