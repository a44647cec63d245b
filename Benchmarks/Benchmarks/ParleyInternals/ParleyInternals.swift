// Benchmarks that look inside Parley: time and allocations of the pieces every proxied
// request goes through. Each figure is per operation (1,000 operations per sample for
// the fast ones), so one more allocation per request shows as +1 in the malloc column.
// Run: scripts/bench-internals.sh.
//
// Not covered yet: ProxyRules.forwardable/returnable (the proxy's header filtering) is
// internal to ParleyServer; the header benchmarks below measure the public pieces it is
// built from (HeaderFields, ResponseHeadParser, ProxyPath, URLParts).
import AuthFlows
import Benchmark
import Conversation
import Foundation
import ParleyCrypto

/// Wall time, throughput and allocations. Units are plain counts (no automatic K/M), so
/// that scripts/bench-internals.sh can read the figures and one allocation more shows.
/// 1,000 operations per sample for the fast pieces; one per sample for the slow ones
/// (tens to hundreds of microseconds), which would otherwise give a handful of samples.
func configuration(slow: Bool) -> Benchmark.Configuration {
    let metrics: [BenchmarkMetric] = [.wallClock, .throughput, .mallocCountTotal, .mallocBytesCount]
    return .init(
        metrics: metrics, timeUnits: .nanoseconds, units: Dictionary(uniqueKeysWithValues: metrics.map { ($0, .count) }),
        warmupIterations: slow ? 10 : 3, scalingFactor: slow ? .one : .kilo, maxDuration: .seconds(1),
        maxIterations: slow ? 10_000 : 1_000)
}

let benchmarks: @Sendable () -> Void = {
    let fast = configuration(slow: false)
    let slow = configuration(slow: true)
    Benchmark.defaultConfiguration = fast

    // ------------------------------------------------------------------ engine
    // ConversationManager.execute of a GET, with the manager built by
    // DestinationConfigurator.makeManager, on an in-memory upstream.

    let getRequest = UpstreamRequest(
        method: "GET", url: Fixtures.upstreamURL, headers: HeaderFields(Fixtures.forwardedRequestHeaders))

    let plain = Fixtures.manager(
        destination: "plain",
        transport: CannedTransport(status: 200, headers: Fixtures.responseHeadersNoCookies, body: Fixtures.responseBody),
        cookies: [])
    Benchmark("Engine: GET, plain destination, empty jar") { benchmark in
        for _ in benchmark.scaledIterations {
            guard case .response(let response) = try await plain.execute(getRequest) else { fatalError("no response") }
            response.body.discard()
            blackHole(response)
        }
    }

    let bearer = Fixtures.manager(
        destination: "bearer",
        transport: CannedTransport(status: 200, headers: Fixtures.responseHeadersNoCookies, body: Fixtures.responseBody),
        cookies: Fixtures.jar(20), oauth2: true)
    Benchmark("Engine: GET, OAuth2 bearer (cached token), jar of 20") { benchmark in
        for _ in benchmark.scaledIterations {
            guard case .response(let response) = try await bearer.execute(getRequest) else { fatalError("no response") }
            response.body.discard()
            blackHole(response)
        }
    }

    let setsCookies = Fixtures.manager(
        destination: "plain",
        transport: CannedTransport(status: 200, headers: Fixtures.responseHeaders, body: Fixtures.responseBody),
        cookies: Fixtures.jar(20))
    Benchmark("Engine: GET, answer sets 2 cookies, jar of 20", configuration: slow) { benchmark in
        for _ in benchmark.scaledIterations {
            guard case .response(let response) = try await setsCookies.execute(getRequest) else { fatalError("no response") }
            response.body.discard()
            blackHole(response)
        }
    }

    // ------------------------------------------------------------------ headers and URLs

    Benchmark("Headers: HeaderFields from 12 forwarded request headers") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(HeaderFields(Fixtures.forwardedRequestHeaders))
        }
    }

    let responseHeaders = Fixtures.responseHeaders
    Benchmark("Headers: 5 lookups in a 16-field response head") { benchmark in
        // What the engine, the filters and the proxy ask of every answer.
        for _ in benchmark.scaledIterations {
            blackHole(responseHeaders.values("Set-Cookie"))
            blackHole(responseHeaders["Content-Length"])
            blackHole(responseHeaders["WWW-Authenticate"])
            blackHole(responseHeaders["X-CSRF-Token"])
            blackHole(responseHeaders.contains("com.sap.cloud.security.login"))
        }
    }

    let headLines = Fixtures.responseHeaderLines.map { Array($0.utf8) }
    Benchmark("Headers: ResponseHeadParser, status line + 16 fields") { benchmark in
        for _ in benchmark.scaledIterations {
            var parser = ResponseHeadParser()
            for line in headLines { blackHole(parser.feed(line: line)) }
        }
    }

    Benchmark("URL: ProxyPath.upstreamURL, 4 segments + query") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(
                try ProxyPath.upstreamURL(
                    baseURL: Fixtures.baseURL, rawPath: "ZBENCH_SRV/Items('4711')/Lines/x%20y", rawQuery: "$top=50&$format=json"))
        }
    }

    Benchmark("URL: URLParts of an upstream URL") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(URLParts(Fixtures.upstreamURL))
        }
    }

    // ------------------------------------------------------------------ cookies

    let url = URLParts(Fixtures.upstreamURL)!
    for count in [20, 200] {
        let jar = Fixtures.jar(count)
        let now = Date()
        Benchmark("Cookies: header(for:) from a jar of \(count)", configuration: count > 50 ? slow : fast) { benchmark in
            for _ in benchmark.scaledIterations {
                blackHole(Cookies.header(for: url, from: jar, at: now))
            }
        }
        // What a proxied call pays with the jar cached: the index's remembered header.
        let index = CookieJarIndex(jar)
        Benchmark("Cookies: CookieJarIndex header(for:), a jar of \(count)") { benchmark in
            for _ in benchmark.scaledIterations {
                blackHole(index.header(for: url, at: now))
            }
        }
    }

    let now = Date()
    Benchmark("Cookies: parse 5 typical Set-Cookie values", configuration: slow) { benchmark in
        for _ in benchmark.scaledIterations {
            for header in Fixtures.setCookies { blackHole(Cookies.parse(header, from: url, at: now)) }
        }
    }

    // ------------------------------------------------------------------ sealing (AES-256-GCM)

    let ring = Fixtures.keyRing
    let aad = "tokens.access:7f1c2a9e-4b6d-4c1a-9f0e-2d3b4c5d6e7f"
    for (label, size) in [("40 B token", 40), ("2 KiB value", 2048)] {
        let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let sealed = ring.seal(plaintext, associatedData: aad)
        Benchmark("Sealing: KeyRing.seal, \(label)") { benchmark in
            for _ in benchmark.scaledIterations {
                blackHole(ring.seal(plaintext, associatedData: aad))
            }
        }
        Benchmark("Sealing: KeyRing.open, \(label)") { benchmark in
            for _ in benchmark.scaledIterations {
                blackHole(try ring.open(sealed, associatedData: aad))
            }
        }
    }
}
