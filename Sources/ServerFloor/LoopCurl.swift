import CCurl
import CEpoll
import Glibc
import NIOCore
import NIOPosix
import Synchronization

/// libcurl driven on an event loop (`curl_multi_socket_action`), for the floor of that design:
/// the loop starts each transfer and runs every curl callback; one watcher thread only waits
/// for the sockets' readiness (epoll, one shot) and hands what each wait brought to each loop
/// in one `execute`. No Parley code uses this; `make bench` measures it beside `CurlTransport`.
/// Every property but the watcher's is touched on `loop` only.
final class LoopCurl: @unchecked Sendable {
    let loop: any EventLoop
    private let index: UInt32
    private var multi: UnsafeMutableRawPointer?
    /// The transfers in flight by their easy handle: the body so far and who waits.
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    /// What curl wants watched, by socket (`CURL_POLL_IN` …).
    private var watched: [Int32: Int32] = [:]
    private var timer: Scheduled<Void>?

    final class Transfer {
        var body: [UInt8] = []
        let done: (Int, [UInt8]) -> Void
        init(done: @escaping (Int, [UInt8]) -> Void) { self.done = done }
    }

    private init(loop: any EventLoop, index: UInt32) {
        self.loop = loop
        self.index = index
    }

    private static let all = Mutex<[LoopCurl]>([])
    /// The watcher's epoll instance, -1 when the kernel refused one (every transfer then fails).
    private static let epoll: Int32 = {
        let fd = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard fd >= 0 else { return -1 }
        // A thread of its own that blocks in epoll_wait for the life of the process.
        let watcher = NIOThreadPool(numberOfThreads: 1)
        watcher.start()
        watcher.submit { _ in watch(fd) }
        return fd
    }()

    /// The driver of `loop`, made once per loop.
    static func `for`(_ loop: any EventLoop) -> LoopCurl {
        all.withLock { all in
            if let known = all.first(where: { $0.loop === loop }) { return known }
            let made = LoopCurl(loop: loop, index: UInt32(all.count))
            all.append(made)
            return made
        }
    }

    private static func watch(_ epoll: Int32) {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let n = epoll_wait(epoll, &events, 64, -1)
            if n < 0 && errno != EINTR { return }
            guard n > 0 else { continue }
            let drivers = all.withLock { $0 }
            // One hand-over per loop for everything this wait brought.
            var ready = [[(Int32, Int32)]](repeating: [], count: drivers.count)
            for event in events.prefix(Int(n)) {
                let index = Int(event.data.u64 >> 32), fd = Int32(truncatingIfNeeded: event.data.u64 & 0xffff_ffff)
                guard drivers.indices.contains(index) else { continue }
                var mask: Int32 = 0
                if event.events & EPOLLIN.rawValue != 0 { mask |= CURL_CSELECT_IN }
                if event.events & EPOLLOUT.rawValue != 0 { mask |= CURL_CSELECT_OUT }
                if event.events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { mask |= CURL_CSELECT_ERR }
                ready[index].append((fd, mask))
            }
            for (driver, sockets) in zip(drivers, ready) where !sockets.isEmpty {
                driver.loop.execute { for (fd, mask) in sockets { driver.ready(fd, mask) } }
            }
        }
    }

    /// Starts a GET of `url`; `done` runs on the loop with the status and body (502 on failure).
    func get(_ url: String, done: @escaping (Int, [UInt8]) -> Void) {
        if multi == nil { multi = makeMulti() }
        guard Self.epoll >= 0, let multi, let easy = curl_easy_init() else { return done(502, []) }
        let transfer = Transfer(done: done)
        transfers[easy] = transfer
        _ = c_parley_easy_setopt_string(easy, CURLOPT_URL, url)
        _ = c_parley_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = c_parley_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, Unmanaged.passUnretained(transfer).toOpaque())
        _ = c_parley_easy_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION) { pointer, size, count, userdata in
            guard let pointer, let userdata else { return 0 }
            let transfer = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
            transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: size * count))
            return size * count
        }
        curl_multi_add_handle(multi, easy)
        act(c_parley_socket_timeout(), 0)
    }

    private func makeMulti() -> UnsafeMutableRawPointer? {
        guard let multi = curl_multi_init() else { return nil }
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = c_parley_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, me)
        _ = c_parley_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, me)
        _ = c_parley_multi_setopt_socket_cb(multi) { _, fd, what, userp, _ in
            guard let userp else { return 0 }
            Unmanaged<LoopCurl>.fromOpaque(userp).takeUnretainedValue().socket(fd, what)
            return 0
        }
        _ = c_parley_multi_setopt_timer_cb(multi) { _, milliseconds, userp in
            guard let userp else { return 0 }
            Unmanaged<LoopCurl>.fromOpaque(userp).takeUnretainedValue().setTimer(milliseconds)
            return 0
        }
        return multi
    }

    private func socket(_ fd: Int32, _ what: Int32) {
        let known = watched[fd] != nil
        if what == CURL_POLL_REMOVE {
            watched[fd] = nil
            var none = epoll_event()
            if known { epoll_ctl(Self.epoll, EPOLL_CTL_DEL, fd, &none) }
            return
        }
        watched[fd] = what
        arm(fd, what, adding: !known)
    }

    private func arm(_ fd: Int32, _ what: Int32, adding: Bool) {
        var event = epoll_event()
        var mask = EPOLLONESHOT.rawValue
        if what & CURL_POLL_IN != 0 { mask |= EPOLLIN.rawValue }
        if what & CURL_POLL_OUT != 0 { mask |= EPOLLOUT.rawValue }
        event.events = mask
        event.data.u64 = UInt64(index) << 32 | UInt64(UInt32(bitPattern: fd))
        if epoll_ctl(Self.epoll, adding ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event) != 0 && adding {
            epoll_ctl(Self.epoll, EPOLL_CTL_MOD, fd, &event)
        }
    }

    private func setTimer(_ milliseconds: Int) {
        timer?.cancel()
        timer = nil
        guard milliseconds >= 0 else { return }
        timer = loop.scheduleTask(in: .milliseconds(Int64(milliseconds))) { self.act(c_parley_socket_timeout(), 0) }
    }

    private func ready(_ fd: Int32, _ mask: Int32) {
        act(fd, mask)
        // One shot: watch again what curl still wants.
        if let what = watched[fd] { arm(fd, what, adding: false) }
    }

    private func act(_ fd: Int32, _ mask: Int32) {
        guard let multi else { return }
        var running: Int32 = 0
        curl_multi_socket_action(multi, fd, mask, &running)
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = c_parley_msg_result(message)
            var status = 0
            _ = c_parley_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            curl_multi_remove_handle(multi, easy)
            curl_easy_cleanup(easy)
            if let transfer = transfers.removeValue(forKey: easy) {
                transfer.done(result == CURLE_OK ? status : 502, transfer.body)
            }
        }
    }
}
