// swift-tools-version:6.1
// Benchmarks that look inside Parley: the conversation engine, header handling, cookie
// matching and sealing, with time and allocations (package-benchmark, ordo-one).
//
// A package of its own so that `swift build --build-tests` of the main package (and CI)
// never builds it: run `scripts/bench-internals.sh`, or
// `swift package --package-path Benchmarks benchmark`.
import PackageDescription

let package = Package(
    name: "ParleyBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "parley", path: ".."),
        // MallocInterposer (instead of the default traits): malloc counts from the
        // package's own interposer, so jemalloc is not needed; leaving out the default
        // RuntimeInterposer trait keeps swift-runtime-interposer (ARC counts on Linux
        // with Swift 6.3) out of the build.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "ParleyInternals",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "ParleyBenchmarkSupport", package: "parley"),
            ],
            path: "Benchmarks/ParleyInternals",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
