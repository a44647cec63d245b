import Foundation
import Testing

@testable import Store

/// Pure tests: no database.
@Suite struct SQLRenderingTests {
    @Test func interpolatedValuesBecomeNumberedParameters() {
        let name = "x'); DROP TABLE t; --"
        let limit = 5
        let sql: SQL = "SELECT * FROM t WHERE name = \(name) ORDER BY \(unsafeSQL: "id DESC") LIMIT \(limit)"
        #expect(sql.text == "SELECT * FROM t WHERE name = $1 ORDER BY id DESC LIMIT $2")
        #expect(sql.parameterCount == 2)
        #expect(!sql.description.contains("DROP"))
        let bindings = sql.rendered.bindings
        #expect(bindings.map(\.value) == [name, "5"])
        #expect(bindings.map(\.type) == [.unknown, .int8])
    }

    @Test func fragmentsAreRenumbered() {
        let filter: SQL = "destination = \("a") AND status = \("active")"
        let sql: SQL = "SELECT id FROM registrations WHERE \(filter) AND id > \(UUID())"
        #expect(sql.text == "SELECT id FROM registrations WHERE destination = $1 AND status = $2 AND id > $3")
        let joined = ("SELECT \(1)" as SQL) + " UNION SELECT \(2)"
        #expect(joined.text == "SELECT $1 UNION SELECT $2")
    }

    @Test func optionalsBindAsTypedNulls() {
        let missing: Date? = nil
        let present: Int32? = 7
        let sql: SQL = "VALUES (\(missing), \(present))"
        #expect(sql.rendered.bindings.map(\.value) == [nil, "7"])
        #expect(sql.rendered.bindings.map(\.type) == [.timestamptz, .int4])
    }

    @Test func valuesUsePostgresTextFormats() {
        #expect([UInt8]([0, 1, 0xab, 0xff]).sqlText == "\\x0001abff")
        #expect(true.sqlText == "true")
        #expect(Double.infinity.sqlText == "Infinity")
        #expect(Double.nan.sqlText == "NaN")
        #expect(Date(timeIntervalSince1970: 0).sqlText == "1970-01-01T00:00:00.000000Z")
        #expect(Date(timeIntervalSince1970: 1_700_000_000.123456).sqlText == "2023-11-14T22:13:20.123456Z")
        #expect(Date(timeIntervalSince1970: -0.5).sqlText == "1969-12-31T23:59:59.500000Z")
    }

    /// An upstream's absurd lifetime (`expires_in: 1e300`, a huge `Max-Age`) becomes a date no
    /// timestamp holds: it is bound as the nearest end of the range, never trapped on.
    @Test func datesBeyondTheRangeAreClampedNotTrapped() {
        #expect(TimestampFormat.format(Date(timeIntervalSince1970: 1e300)) == TimestampFormat.format(Date(timeIntervalSince1970: 253_402_300_799.999999)))
        #expect(TimestampFormat.format(Date(timeIntervalSince1970: 1e300)).hasPrefix("9999-12-31"))
        #expect(TimestampFormat.format(Date(timeIntervalSince1970: -1e300)).hasPrefix("0001-01-01"))
        #expect(TimestampFormat.format(.distantFuture).hasPrefix("4001-01-01"))
        #expect(TimestampFormat.format(Date(timeIntervalSince1970: 1_700_000_000)).hasPrefix("2023-11-14"))
    }

    @Test func timestampsParseFromPostgresOutput() throws {
        let cases: [(String, Double)] = [
            ("2023-11-14 22:13:20.123456+00", 1_700_000_000.123456),
            ("2023-11-14 22:13:20+00", 1_700_000_000),
            ("2023-11-14 23:43:20.5+01:30", 1_700_000_000.5),
            ("2023-11-14 22:13:20", 1_700_000_000),
            ("1970-01-01", 0),
            ("1969-12-31 23:59:59.5+00", -0.5),
        ]
        for (text, seconds) in cases {
            let date = try #require(TimestampFormat.parse(text), "\(text)")
            #expect(abs(date.timeIntervalSince1970 - seconds) < 1e-6, "\(text)")
        }
        #expect(TimestampFormat.parse("infinity") == .distantFuture)
        #expect(TimestampFormat.parse("yesterday") == nil)
        #expect(TimestampFormat.parse("2023-13-01") == nil)
    }

    @Test func byteaHexDecodes() {
        #expect(Row.decodeByteaHex("\\x") == [])
        #expect(Row.decodeByteaHex("\\x00ff7A") == [0, 255, 0x7a])
        #expect(Row.decodeByteaHex("00ff") == nil)
        #expect(Row.decodeByteaHex("\\x0") == nil)
        #expect(Row.decodeByteaHex("\\xzz") == nil)
    }

    @Test func errorDescriptionsCarryNoServerText() {
        let error = StoreError.server(
            sqlState: "22P02", constraint: nil,
            message: "invalid input syntax for type integer: \"hunter2\"", connectionBroken: false
        )
        #expect(error.code == .query)
        #expect(!error.description.contains("hunter2"))
        #expect(error.debugDescription.contains("hunter2"))
        #expect(StoreError.server(sqlState: "08006", constraint: nil, message: nil, connectionBroken: false).code == .unavailable)
        #expect(StoreError.server(sqlState: "57P01", constraint: nil, message: nil, connectionBroken: false).code == .unavailable)
        #expect(StoreError.server(sqlState: "42601", constraint: nil, message: nil, connectionBroken: true).code == .unavailable)
        #expect(StoreError.server(sqlState: "23505", constraint: "k", message: nil, connectionBroken: false).code == .uniqueViolation)
    }

    @Test func configurationReportsEveryProblemWithoutTheString() {
        let configuration = StoreConfiguration(
            connectionString: "host=a password='hunter2", maxConnections: 0, acquireTimeout: .zero
        )
        let problems = configuration.problems
        #expect(problems.count == 3)
        #expect(!problems.joined().contains("hunter2"))
        #expect(StoreConfiguration(connectionString: "postgresql://u@a,b/db?target_session_attrs=read-write").problems.isEmpty)
    }
}

/// The pool's state machine, driven directly.
@Suite struct PoolStateMachineTests {
    typealias Machine = PoolStateMachine<String, String>

    @Test func neverOpensMoreThanTheMaximum() {
        var machine = Machine(maxConnections: 2)
        guard case .grant(.connect) = machine.acquire() else { Issue.record("first acquire should connect"); return }
        guard case .grant(.connect) = machine.acquire() else { Issue.record("second acquire should connect"); return }
        guard case .mustWait = machine.acquire() else { Issue.record("third acquire should wait"); return }
        guard case .queued = machine.enqueue(id: 1, waiter: "w1") else { Issue.record("should queue"); return }
        #expect(machine.open == 2)
        #expect(machine.peakOpen == 2)
    }

    @Test func waitersAreServedInOrder() {
        var machine = Machine(maxConnections: 1)
        _ = machine.acquire()
        _ = machine.enqueue(id: 1, waiter: "first")
        _ = machine.enqueue(id: 2, waiter: "second")
        let action = machine.release("c1", reusable: true)
        #expect(action.resume?.0 == "first")
        if case .connection(let c)? = action.resume?.1 { #expect(c == "c1") } else { Issue.record("expected the connection") }
        // A broken connection frees its slot for the next waiter, who connects.
        let broken = machine.release("c1", reusable: false)
        #expect(broken.close == "c1")
        #expect(broken.resume?.0 == "second")
        if case .connect? = broken.resume?.1 {} else { Issue.record("expected a slot") }
        #expect(machine.open == 1)
    }

    @Test func aFailedConnectWithNothingEstablishedFailsEveryWaiter() {
        var machine = Machine(maxConnections: 2)
        _ = machine.acquire()
        _ = machine.acquire()
        _ = machine.enqueue(id: 1, waiter: "w1")
        _ = machine.enqueue(id: 2, waiter: "w2")
        let action = machine.connectFailed(unreachable: true)
        #expect(action.fail == ["w1", "w2"])
        #expect(action.resume == nil)
        #expect(machine.open == 1)
        #expect(machine.waitingCount == 0)
        // The next caller tries again.
        guard case .grant(.connect) = machine.acquire() else { Issue.record("expected a new attempt"); return }
    }

    @Test func aFailedConnectBesideEstablishedConnectionsPassesTheSlotOn() {
        var machine = Machine(maxConnections: 2)
        _ = machine.acquire()
        machine.connectSucceeded()
        _ = machine.acquire()
        _ = machine.enqueue(id: 1, waiter: "w")
        let action = machine.connectFailed(unreachable: true)
        #expect(action.resume == "w")
        #expect(action.fail.isEmpty)
        #expect(machine.open == 2)
        #expect(machine.connecting == 1)
    }

    @Test func aCancelledConnectPassesTheSlotOn() {
        var machine = Machine(maxConnections: 1)
        _ = machine.acquire()
        _ = machine.enqueue(id: 1, waiter: "w")
        #expect(machine.connectFailed(unreachable: false).resume == "w")
        #expect(machine.open == 1)
        #expect(machine.connectFailed(unreachable: false).resume == nil)
        #expect(machine.open == 0)
    }

    @Test func timedOutWaitersLeaveTheQueue() {
        var machine = Machine(maxConnections: 1)
        _ = machine.acquire()
        _ = machine.enqueue(id: 1, waiter: "w")
        #expect(machine.removeWaiter(id: 1) == "w")
        #expect(machine.removeWaiter(id: 1) == nil)
        #expect(machine.release("c", reusable: true).resume == nil)
        #expect(machine.idleCount == 1)
    }

    @Test func shutdownClosesIdleFailsWaitersAndDrains() {
        var machine = Machine(maxConnections: 2)
        _ = machine.acquire()
        _ = machine.acquire()
        _ = machine.release("idle", reusable: true)
        _ = machine.acquire()  // takes "idle" again
        _ = machine.release("idle", reusable: true)
        _ = machine.enqueue(id: 9, waiter: "late")  // an idle connection exists: granted, not queued
        let action = machine.shutdown()
        #expect(action.fail.isEmpty)
        #expect(action.close.isEmpty)  // the idle one was granted to "late"
        #expect(!action.drained)
        #expect(machine.release("x", reusable: true).close == "x")
        #expect(machine.release("y", reusable: true).drained)
        guard case .shutDown = machine.acquire() else { Issue.record("acquire after shutdown"); return }
    }
}
