// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "parley",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "parley", targets: ["parley"]),
        .executable(name: "upstream-simulator", targets: ["UpstreamSimulatorCLI"]),
        .executable(name: "parley-fuzz", targets: ["ParleyFuzz"]),
        .executable(name: "server-floor", targets: ["ServerFloor"]),
        // For the separate benchmark package in Benchmarks/ (package-benchmark), which
        // can only reach another package's targets through its library products.
        // For apps (iOS, macOS, Linux): Foundation's URLSession only, none of the server's packages.
        .library(name: "ParleyClient", targets: ["ParleyClient"]),
        .library(name: "ParleyBenchmarkSupport", targets: ["Conversation", "AuthFlows", "ParleyCrypto", "ParleyEncoding"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),  // LogHandler.log(event:)
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.24.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.1.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.0.0"),
        // Traces (docs/operations.md "Traces"): OTLP/HTTP only; the gRPC exporter is not built.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.1.0"),
        // Configuration (ConfigReader over the environment). No traits: no JSON, YAML or reloading
        // providers are built (Hummingbird already links the library with none).
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0", traits: []),
        // Identity tokens (JWKS; RS256, PS256, ES256), verified in AuthFlows.
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.0.0"),
        // jwt-kit's own crypto; the simulator's demo identity provider signs with it (RSA from CryptoExtras).
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"6.0.0"),
    ],
    targets: [
        // C libraries, each behind a prefixed shim header.
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CPSL", pkgConfig: "libpsl", providers: [.apt(["libpsl-dev"])]),
        .systemLibrary(name: "CXMLSec", pkgConfig: "xmlsec1-openssl", providers: [.apt(["libxmlsec1-dev"])]),

        // Pure codecs (hex, base64, percent/form): no C, no Foundation.
        .target(name: "ParleyEncoding", swiftSettings: swiftSettings),
        .target(name: "ParleyCrypto", dependencies: ["COpenSSL", "ParleyEncoding"], swiftSettings: swiftSettings),
        .target(
            name: "Conversation",
            dependencies: ["ParleyEncoding", .product(name: "Logging", package: "swift-log"), .product(name: "Tracing", package: "swift-distributed-tracing")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CurlTransport",
            dependencies: ["CCurl", "Conversation", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Store",
            dependencies: [
                "CPostgres", "ParleyCrypto", "ParleyEncoding",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AuthFlows",
            dependencies: [
                "CPSL", "Conversation", "ParleyCrypto", "ParleyEncoding", .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"), .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        // Who signed in through SAML2: the SAMLResponse's signed NameID (libxml2 + xmlsec behind CXMLSec).
        .target(name: "SAMLIdentity", dependencies: ["CXMLSec", "ParleyEncoding"], swiftSettings: swiftSettings),
        // Each HTTP connection's work on the event loop that owns it: a TaskExecutor per loop and
        // Hummingbird's HTTP/1.1 channel wrapped to prefer it (ParleyServer, and server-floor).
        .target(
            name: "LoopAffinity",
            dependencies: [
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The domain: the model, persistence, the rooms and the flow kinds. It imports no
        // Hummingbird, HTTPTypes or NIO HTTP module (LayeringTests); the edge maps its errors.
        .target(
            name: "ParleyDomain",
            dependencies: [
                "AuthFlows", "Conversation", "Store", "ParleyCrypto", "ParleyEncoding", "SAMLIdentity",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // The edge: the composition root, controllers, middleware, pages and the proxy.
        .target(
            name: "ParleyServer",
            dependencies: [
                "ParleyDomain",
                "AuthFlows", "Conversation", "CurlTransport", "LoopAffinity", "Store", "ParleyCrypto", "ParleyEncoding", "SAMLIdentity",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // The pages' stylesheet and message catalogs and the web apps' ES module, compiled in by
            // scripts/embed-resources.sh.
            exclude: ["Pages/style.css", "Pages/parley.js", "Pages/messages.de.json", "Pages/messages.en.json"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "parley",
            dependencies: [
                "ParleyDomain", "ParleyServer", "CurlTransport", "Store", "Conversation", "ParleyEncoding",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            swiftSettings: swiftSettings,
            // A release binary is linked by lld with packed relative relocations (DT_RELR, glibc
            // 2.36+) and exports no symbols. The toolchain's static runtime asks for
            // `-export-dynamic`, which put all 59,000 of the binary's symbols in its dynamic table,
            // and gold wrote 155,000 relocations (3.7 MB) that the loader read at every start:
            // 7 MiB of resident memory for nothing. Nothing looks Parley's own symbols up at run
            // time; backtraces read the file's symbol table. The binary stays position-independent.
            linkerSettings: [
                .unsafeFlags(
                    ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic"],
                    .when(platforms: [.linux], configuration: .release)
                )
            ]
        ),

        .target(
            name: "UpstreamSimulator",
            dependencies: [
                "ParleyCrypto", "ParleyEncoding",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(name: "UpstreamSimulatorCLI", dependencies: ["UpstreamSimulator"], swiftSettings: swiftSettings),
        // `make bench`'s server floors: a proxied GET's least cost on NIO alone and on Hummingbird,
        // with Parley's libcurl transport, with libcurl driven on the loop, and without
        // (docs/benchmarks.md, "What it does"). CEpoll: sys/epoll.h, for the loop-driven one.
        .systemLibrary(name: "CEpoll"),
        .executableTarget(
            name: "ServerFloor",
            dependencies: [
                "LoopAffinity", "CurlTransport", "Conversation", "CCurl", "CEpoll",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        // Fuzz targets for the parsers that see untrusted bytes (docs/fuzzing.md): one function
        // per parser, replayed over Tests/Fuzz by the tests and run by libFuzzer in scripts/fuzz.sh.
        .target(name: "ParleyFuzzTargets", dependencies: ["Conversation", "AuthFlows", "ParleyEncoding", "SAMLIdentity"], swiftSettings: swiftSettings),
        // libFuzzer's driver entry point; linked only when built with -sanitize=fuzzer.
        .systemLibrary(name: "CParleyFuzz"),
        .executableTarget(name: "ParleyFuzz", dependencies: ["ParleyFuzzTargets", "CParleyFuzz"], swiftSettings: swiftSettings),

        // The client library for apps (docs/client.md): no dependencies beyond Foundation.
        .target(name: "ParleyClient", swiftSettings: swiftSettings),

        .target(
            name: "ParleyTesting",
            dependencies: [
                "Conversation", "AuthFlows", "ParleyDomain", "ParleyServer", "Store", "ParleyCrypto", "ParleyEncoding",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        .testTarget(name: "SAMLIdentityTests", dependencies: ["SAMLIdentity", "ParleyEncoding"], swiftSettings: swiftSettings),
        .testTarget(name: "ParleyCryptoTests", dependencies: ["ParleyCrypto", "ParleyEncoding"], swiftSettings: swiftSettings),
        .testTarget(
            name: "ConversationTests",
            dependencies: ["Conversation", "AuthFlows", "ParleyTesting", "ParleyCrypto", "ParleyEncoding", "UpstreamSimulator"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CurlTransportTests",
            dependencies: ["CurlTransport", "Conversation", "ParleyTesting", "UpstreamSimulator", "ParleyCrypto", "ParleyEncoding"],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "ParleyFuzzTests", dependencies: ["ParleyFuzzTargets", "AuthFlows"], swiftSettings: swiftSettings),
        // ParleyClient against the real binary, the simulator and Chromium.
        .testTarget(
            name: "ParleyClientTests",
            dependencies: ["ParleyClient", "ParleyTesting", "UpstreamSimulator", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "StoreTests", dependencies: ["Store", "ParleyTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SimulatorTests",
            dependencies: ["UpstreamSimulator", "ParleyTesting", "ParleyCrypto", "ParleyEncoding", "CurlTransport", "Conversation"],
            swiftSettings: swiftSettings
        ),
        // The domain's unit and in-memory tests (and the walls between the targets).
        .testTarget(
            name: "ParleyDomainTests",
            dependencies: ["ParleyDomain", "ParleyTesting", "AuthFlows", "Conversation", "Store", "ParleyCrypto", "ParleyEncoding"],
            swiftSettings: swiftSettings
        ),
        // The edge: router-tier tests and live ones (the real binary or server object, PostgreSQL, Chromium).
        .testTarget(
            name: "ParleyServerTests",
            dependencies: [
                "ParleyDomain", "ParleyServer", "ParleyTesting", "UpstreamSimulator", "ParleyEncoding", "AuthFlows", "Conversation", "Store", "ParleyCrypto", "CurlTransport",
                "LoopAffinity",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                // The webhook verifier docs/api.md shows, compiled and run as written.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
