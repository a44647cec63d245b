import Foundation
import ParleyTesting
import Store
import Synchronization
import Testing

/// These stop and start PostgreSQL, so each has a server of its own.
@Suite struct OutageTests {
    @Test func callsFailFastWhileTheDatabaseIsDownAndRecoverAfterwards() async throws {
        try await PostgresServer.withServer { server in
            try await withStore(server.connectionString, maxConnections: 4) { store in
                // Fill the pool with connections that the outage will break.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<4 { group.addTask { _ = try await store.query("SELECT pg_sleep(0.05)::text AS s") } }
                    try await group.waitForAll()
                }
                #expect(store.statistics.idle >= 1)

                try await server.stop()
                var slowest = Duration.zero
                for _ in 0..<6 {
                    let start = ContinuousClock.now
                    let error = await storeError { _ = try await store.query("SELECT 1 AS one") }
                    let took = ContinuousClock.now - start
                    #expect(error?.code == .unavailable)
                    #expect(took < .seconds(5))
                    slowest = max(slowest, took)
                }
                // Concurrent callers during the outage fail fast as well.
                let start = ContinuousClock.now
                let codes = try await withThrowingTaskGroup(of: StoreError.Code?.self) { group in
                    for _ in 0..<20 {
                        group.addTask {
                            do {
                                _ = try await store.query("SELECT 1 AS one")
                                return nil
                            } catch let error as StoreError {
                                return error.code
                            }
                        }
                    }
                    return try await group.reduce(into: [StoreError.Code?]()) { $0.append($1) }
                }
                let concurrent = ContinuousClock.now - start
                #expect(codes.allSatisfy { $0 == .unavailable })
                #expect(concurrent < .seconds(5))

                try await server.start()
                let recoveryStart = ContinuousClock.now
                let one = try await store.query("SELECT 1 AS one").first?.int("one")
                let recovery = ContinuousClock.now - recoveryStart
                #expect(one == 1)
                // The same pool keeps working.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<10 { group.addTask { _ = try await store.query("SELECT 1 AS one") } }
                    try await group.waitForAll()
                }
                #expect(store.statistics.peakOpen <= 4)
                measured(
                    "outage: slowest failing call \(Int(slowest.milliseconds)) ms; 20 concurrent calls failed in \(Int(concurrent.milliseconds)) ms; "
                        + "first call after restart succeeded in \(Int(recovery.milliseconds)) ms"
                )
            }
        }
    }

    @Test func aDatabaseThatNeverAnswersFailsWithinTheConnectTimeout() async throws {
        let silent = try LoopbackSocket(listening: true)
        let store = PostgresStore(
            configuration: StoreConfiguration(
                connectionString: "host=127.0.0.1 port=\(silent.port) user=parley dbname=parley sslmode=disable",
                maxConnections: 2, acquireTimeout: .seconds(2), connectTimeout: .seconds(2)
            ),
            logger: quietLogger
        )
        let start = ContinuousClock.now
        let codes = try await withThrowingTaskGroup(of: StoreError.Code?.self) { group in
            for _ in 0..<6 {
                group.addTask { await storeError { _ = try await store.query("SELECT 1 AS one") }?.code }
            }
            return try await group.reduce(into: [StoreError.Code?]()) { $0.append($1) }
        }
        let took = ContinuousClock.now - start
        await store.shutdown()
        #expect(codes.allSatisfy { $0 == .unavailable })
        #expect(took < .seconds(5))
        measured("unanswering database: 6 calls on a pool of 2 all failed within \(Int(took.milliseconds)) ms (connect timeout 2 s)")
    }

    @Test func theListenerDeliversAndSurvivesARestart() async throws {
        try await PostgresServer.withServer { server in
            try await withStore(server.connectionString) { store in
                let listener = NotificationListener(
                    configuration: StoreConfiguration(connectionString: server.connectionString),
                    listener: .init(initialReconnectDelay: .milliseconds(50), maxReconnectDelay: .milliseconds(500)),
                    logger: quietLogger
                )
                let events = Locked<[NotificationListener.Event]>([])
                func seen(_ event: NotificationListener.Event) -> Bool { events.withLock { $0.contains(event) } }
                let stream = listener.notifications(channel: "Parley.Tokens")
                let otherChannel = listener.notifications(channel: "other")

                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await listener.run() }
                    group.addTask {
                        for await event in stream { events.withLock { $0.append(event) } }
                    }
                    group.addTask {
                        for await event in otherChannel {
                            if case .notification(let payload) = event {
                                Issue.record("the other channel got a notification: \(payload)")
                            }
                        }
                    }

                    try await eventually("LISTEN to be active") { seen(.listening) }
                    try await store.notify(channel: "Parley.Tokens", payload: "revoke 'a'; -- \u{1F511}")
                    try await eventually("the first notification") { seen(.notification("revoke 'a'; -- \u{1F511}")) }

                    try await server.stop()
                    try await eventually("the listener to notice the outage") { seen(.disconnected) }
                    let restartedAt = ContinuousClock.now
                    try await server.start()
                    try await eventually("the listener to reconnect") { seen(.reconnected) }
                    let reconnect = ContinuousClock.now - restartedAt

                    try await store.notify(channel: "Parley.Tokens", payload: "after restart")
                    try await eventually("a notification after the restart") { seen(.notification("after restart")) }
                    measured("listener: reconnected \(Int(reconnect.milliseconds)) ms after PostgreSQL was back")

                    group.cancelAll()
                }
                let sequence = events.withLock { $0 }
                #expect(
                    sequence == [
                        .listening, .notification("revoke 'a'; -- \u{1F511}"), .disconnected, .reconnected,
                        .notification("after restart"),
                    ])
            }
        }
    }

    @Test func theListenerStopsOnGracefulShutdownAndFinishesStreams() async throws {
        let listener = NotificationListener(
            configuration: StoreConfiguration(connectionString: try await freshDatabase()), logger: quietLogger
        )
        let stream = listener.notifications(channel: "c")
        let running = Task { try await listener.run() }
        var sawListening = false
        for await event in stream {
            if event == .listening {
                sawListening = true
                running.cancel()
            }
        }
        // The loop ended: the stream was finished when run() returned.
        try await running.value
        #expect(sawListening)
        var afterwards = listener.notifications(channel: "c").makeAsyncIterator()
        #expect(await afterwards.next() == nil)
    }
}
