import Foundation
import ParleyTesting
import Testing

/// The figures an operator watches, after one conversation with a restart: every family
/// is present, with bounded labels, and counts what happened.
@Suite(.serialized) struct OperatorMetricsTests {
    @Test func oneConversationShowsInEveryFamily() async throws {
        try await withLiveParley { live in
            let (_, token) = try await live.register()
            // The simulator answers the first attempt with a Basic challenge: one restart.
            #expect(try await live.request("GET", "/v1/proxy/api/data", token: token).status == 200)
            #expect(try await live.request("GET", "/v1/proxy/api/data", token: token).status == 200)
            let text = try await live.request("GET", "/metrics").text
            let lines = text.split(separator: "\n").map(String.init)
            func value(_ prefix: String) -> Double? {
                lines.first { $0.hasPrefix(prefix) }.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
            }
            print("[measured] metrics of one conversation:\n" + lines.filter { !$0.hasPrefix("#") && $0.hasPrefix("parley_") }.joined(separator: "\n"))
            #expect((value(#"parley_http_requests_total{route="/v1/proxy/**",status="2xx"}"#) ?? 0) >= 2)
            #expect((value(#"parley_upstream_duration_seconds_count{destination="sim"}"#) ?? 0) >= 2)
            #expect((value(#"parley_conversation_restarts_total{reason="challenge"}"#) ?? 0) >= 1)
            #expect(value(#"parley_db_pool_connections{state="open"}"#) != nil)
            #expect(value("parley_db_pool_waiters") != nil)
            #expect(value("parley_spool_bytes") == 0)
            #expect((value(#"parley_cache_lookups{cache="client_tokens"}"#) ?? 0) >= 2)
            #expect((value(#"parley_cache_hits{cache="client_tokens"}"#) ?? 0) >= 1)
            #expect(value(#"parley_cache_lookups{cache="cookie_jars"}"#) != nil)
            // No label carries a request-specific value (ids, paths with ids, tokens).
            #expect(!text.contains(token))
            #expect(!lines.contains { $0.contains("registration") && $0.contains("-") && $0.hasPrefix("parley_") && $0.contains("id=") })
        }
    }
}
