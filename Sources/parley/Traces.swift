import OTel
import ServiceLifecycle
import Tracing
import ParleyServer

/// Traces (docs/operations.md "Traces"): off unless `PARLEY_OTEL_TRACES=otlp`, or the standard
/// `OTEL_TRACES_EXPORTER=otlp` / `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// say where to send them. `PARLEY_OTEL_TRACES=none` (or `OTEL_SDK_DISABLED=true`,
/// `OTEL_TRACES_EXPORTER=none`) keeps them off whatever else is set. When on, swift-otel reads the
/// other `OTEL_*` variables itself (protocol, headers, batch delay, sampler, service name…).
/// Only traces: logs stay on standard error and metrics on `/metrics`.
enum Traces {
    /// Whether traces are on, or the configuration problem.
    static func enabled(_ environment: [String: String]) throws(ParleyConfiguration.Invalid) -> Bool {
        func set(_ name: String) -> Bool { !(environment[name] ?? "").isEmpty }
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if let exporter = environment["OTEL_TRACES_EXPORTER"]?.lowercased(), exporter == "none" { return false }
        switch environment["PARLEY_OTEL_TRACES"]?.lowercased() {
        case "otlp": return true
        case "none", "off": return false
        case nil, "": break
        case let other?:
            throw ParleyConfiguration.Invalid(problems: ["PARLEY_OTEL_TRACES must be 'otlp' or 'none', not '\(other)'"])
        }
        if environment["OTEL_TRACES_EXPORTER"]?.lowercased() == "otlp" { return true }
        return set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    }

    /// Bootstraps the OTel tracer and returns its exporting service, or nil (no tracer, no
    /// background work: the no-op tracer stays) when traces are off.
    static func bootstrap(_ environment: [String: String]) throws -> (any Service)? {
        guard try enabled(environment) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "parley"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.exporter = .otlp
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        return backend.service
    }
}
