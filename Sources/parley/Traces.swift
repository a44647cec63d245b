import Configuration
import OTel
import ServiceLifecycle
import Tracing
import ParleyServer
import ParleyDomain

/// Traces (docs/operations.md "Traces"): off unless `PARLEY_OTEL_TRACES=otlp`, or the standard
/// `OTEL_TRACES_EXPORTER=otlp` / `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// say where to send them. `PARLEY_OTEL_TRACES=none` (or `OTEL_SDK_DISABLED=true`,
/// `OTEL_TRACES_EXPORTER=none`) keeps them off whatever else is set. When on, swift-otel reads the
/// other `OTEL_*` variables itself (protocol, headers, batch delay, sampler, service name…).
/// Only traces: logs stay on standard error and metrics on `/metrics`.
enum Traces {
    /// Whether traces are on, or the configuration problem.
    static func enabled(_ reader: ConfigReader) throws(ParleyConfiguration.Invalid) -> Bool {
        func value(_ key: ConfigKey) -> String? { reader.string(forKey: key)?.lowercased() }
        if value("otel.sdk_disabled") == "true" { return false }
        if value("otel.traces_exporter") == "none" { return false }
        switch value("parley.otel_traces") {
        case "otlp": return true
        case "none", "off": return false
        case nil, "": break
        case let other?:
            throw ParleyConfiguration.Invalid(problems: ["PARLEY_OTEL_TRACES must be 'otlp' or 'none', not '\(other.prefix(40))'"])
        }
        if value("otel.traces_exporter") == "otlp" { return true }
        return value("otel.exporter_otlp_endpoint") != nil || value("otel.exporter_otlp_traces_endpoint") != nil
    }

    /// Bootstraps the OTel tracer and returns its exporting service, or nil (no tracer, no
    /// background work: the no-op tracer stays) when traces are off.
    static func bootstrap(_ reader: ConfigReader) throws -> (any Service)? {
        guard try enabled(reader) else { return nil }
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
