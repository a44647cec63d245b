import Conversation
import CurlTransport
import Foundation
import ParleyTesting
import Testing

/// A reader that stops reading pauses its transfer (curl's idle limit exempts paused
/// transfers); the pause deadline ends it, so it cannot hold a connection for ever.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct StalledReaderTests {
    @Test func aTransferPausedPastTheDeadlineEndsAndFreesItsConnection() async throws {
        let configuration = CurlTransport.Configuration(highWaterMark: 20_000, lowWaterMark: 5_000, pausedTransferDeadline: .seconds(1))
        try await Fixtures.withSimulatorAndTransport(configuration) { base, _, transport in
            let response = try await transport.send(UpstreamRequest(method: "GET", url: "\(base)/files/big?mb=64"))
            #expect(response.status == 200)
            // Read nothing more: the buffer fills, the transfer pauses, and after the
            // deadline the loop ends it. Wait for that (bounded), not for a fixed time.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(20)
            while transport.statistics.transfersActive > 0 && clock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(transport.statistics.transfersActive == 0)
            // The reader then learns why: the buffered bytes, then a timeout.
            var caught: TransportError?
            do {
                for try await _ in response.body {}
            } catch let error as TransportError {
                caught = error
            }
            #expect(caught?.code == .timeout)
            #expect(caught?.detail.contains("stopped reading") == true)
        }
    }
}
