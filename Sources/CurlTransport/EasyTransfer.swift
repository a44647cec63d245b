internal import CCurl
import Conversation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// One easy handle and everything it points at (header list, upload source). Created,
/// used and released on the multi thread only; `MultiLoop` is its single owner and calls
/// `release()` exactly once, after `curl_multi_remove_handle`.
final class EasyTransfer {
    let handle: UnsafeMutableRawPointer
    let state: TransferState
    let request: PreparedRequest
    private let logger: Logger

    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var uploadBytes: [UInt8] = []
    private var uploadOffset = 0
    /// The body file (its writer may still be filling it: a streamed spool); `uploadOffset`
    /// is the position of the next read.
    private var uploadFile: BodyFile?
    /// A body that passes through once (`RequestBody.pipe`); closed in `release()`, so that
    /// its writer never waits for a transfer that is over.
    private var uploadPipe: BodyPipe?
    private var released = false
    /// Heads up to this body size wait for their body (`Configuration.wholeBodyBytes`).
    private let wholeBodyBytes: Int
    /// The multi thread's list of transfers whose waiter gets a `handOver` after curl's round.
    private let waiting: HandOvers

    // Response head as it arrives, one header block at a time (1xx blocks are dropped).
    private var headParser = ResponseHeadParser()
    private(set) var headDelivered = false
    /// Why the head was refused; the transfer then ends with this instead of curl's write error.
    private(set) var headFailure: String?
    /// When the write callback last paused the transfer for a slow reader; nil while it runs.
    var pausedSince: ContinuousClock.Instant?

    /// Creates and configures the easy handle; on failure nothing is left allocated.
    static func make(
        request: PreparedRequest, state: TransferState, configuration: CurlTransport.Configuration, waiting: HandOvers, logger: Logger
    ) throws(TransportError) -> EasyTransfer {
        guard let handle = curl_easy_init() else {
            throw TransportError(.unavailable, detail: "\(request.host): curl_easy_init failed", mayHaveReachedPeer: false)
        }
        let transfer = EasyTransfer(
            handle: handle, state: state, request: request, wholeBodyBytes: min(configuration.wholeBodyBytes, configuration.highWaterMark), waiting: waiting, logger: logger)
        do {
            try transfer.configure(configuration)
        } catch {
            transfer.release()
            throw error
        }
        return transfer
    }

    private init(
        handle: UnsafeMutableRawPointer, state: TransferState, request: PreparedRequest, wholeBodyBytes: Int, waiting: HandOvers, logger: Logger
    ) {
        self.handle = handle
        self.state = state
        self.request = request
        self.wholeBodyBytes = wholeBodyBytes
        self.waiting = waiting
        self.logger = logger
    }

    deinit {
        precondition(released, "EasyTransfer dropped without release()")
    }

    /// Frees the easy handle, then what it referenced. Idempotent.
    func release() {
        guard !released else { return }
        released = true
        curl_easy_cleanup(handle)
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
        uploadFile = nil
        uploadPipe?.close()
        uploadPipe = nil
    }

    // MARK: Options

    private func check(_ code: CURLcode, _ what: String) throws(TransportError) {
        guard code == CURLE_OK else {
            throw CurlErrors.error(for: code, host: request.host, during: what, requestSent: false)
        }
    }

    private func configure(_ configuration: CurlTransport.Configuration) throws(TransportError) {
        let h = handle
        let me = Unmanaged.passUnretained(self).toOpaque()
        // Before any check can return: `release()` must close the pipe whatever happens.
        if case .pipe(let pipe, _) = request.body { uploadPipe = pipe }

        try check(c_parley_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1), "NOSIGNAL")
        try check(c_parley_easy_setopt_string(h, CURLOPT_URL, request.url), "URL")
        try check(c_parley_easy_setopt_string(h, CURLOPT_PROTOCOLS_STR, "http,https"), "PROTOCOLS_STR")
        try check(c_parley_easy_setopt_string(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"), "REDIR_PROTOCOLS_STR")
        try check(c_parley_easy_setopt_long(h, CURLOPT_FOLLOWLOCATION, 0), "FOLLOWLOCATION")
        // The path goes out as the caller wrote it: no "/../" squashing.
        try check(c_parley_easy_setopt_long(h, CURLOPT_PATH_AS_IS, 1), "PATH_AS_IS")
        if !configuration.useEnvironmentProxy {
            try check(c_parley_easy_setopt_string(h, CURLOPT_PROXY, ""), "PROXY")
        }
        try check(c_parley_easy_setopt_long(h, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1), "SUPPRESS_CONNECT_HEADERS")

        // TLS: the server is always verified.
        try check(c_parley_easy_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1), "SSL_VERIFYPEER")
        try check(c_parley_easy_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2), "SSL_VERIFYHOST")
        // The blob replaces curl's CA file; the system CA directory (CURLOPT_CAPATH, built
        // in on Debian) still applies, so these anchors come in addition to the system's.
        if let ca = request.tls.caPEM, !ca.isEmpty {
            try setBlob(CURLOPT_CAINFO_BLOB, ca, "CAINFO_BLOB")
        }
        if let certificate = request.tls.clientCertificatePEM, let key = request.tls.clientKeyPEM {
            try setBlob(CURLOPT_SSLCERT_BLOB, certificate, "SSLCERT_BLOB")
            try check(c_parley_easy_setopt_string(h, CURLOPT_SSLCERTTYPE, "PEM"), "SSLCERTTYPE")
            try setBlob(CURLOPT_SSLKEY_BLOB, key, "SSLKEY_BLOB")
            try check(c_parley_easy_setopt_string(h, CURLOPT_SSLKEYTYPE, "PEM"), "SSLKEYTYPE")
        } else if let p12 = request.tls.clientPKCS12 {
            guard !p12.isEmpty else {
                throw TransportError(.invalidRequest, detail: "\(request.host): client certificate is empty")
            }
            try setBlob(CURLOPT_SSLCERT_BLOB, p12, "SSLCERT_BLOB")
            try check(c_parley_easy_setopt_string(h, CURLOPT_SSLCERTTYPE, "P12"), "SSLCERTTYPE")
            if let password = request.tls.clientPKCS12Password {
                try check(c_parley_easy_setopt_string(h, CURLOPT_KEYPASSWD, password), "KEYPASSWD")
            }
        }

        // Time limits.
        let timeouts = request.timeouts
        try check(c_parley_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(timeouts.connect)), "CONNECTTIMEOUT_MS")
        if let total = timeouts.total {
            try check(c_parley_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, Self.milliseconds(total)), "TIMEOUT_MS")
        }
        // Idle: under 1 byte/s for LOW_SPEED_TIME seconds (whole seconds, at least 1).
        // curl measures the speed over a window of the last ~5 seconds, so after a burst
        // the limit trips up to ~6 s later than `idle`; a stall from the start trips on time.
        // Paused transfers (a slow reader, not a slow upstream) are exempt.
        try check(c_parley_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, 1), "LOW_SPEED_LIMIT")
        try check(c_parley_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, Self.wholeSeconds(timeouts.idle)), "LOW_SPEED_TIME")

        // Headers.
        for line in request.headerLines {
            guard let list = curl_slist_append(headerList, line) else {
                throw TransportError(.unavailable, detail: "\(request.host): out of memory for headers", mayHaveReachedPeer: false)
            }
            headerList = list
        }
        try check(c_parley_easy_setopt_slist(h, CURLOPT_HTTPHEADER, headerList), "HTTPHEADER")

        // Response callbacks.
        try check(c_parley_easy_setopt_pointer(h, CURLOPT_HEADERDATA, me), "HEADERDATA")
        try check(
            c_parley_easy_setopt_data_cb(h, CURLOPT_HEADERFUNCTION) { pointer, size, count, userdata in
                let transfer = Unmanaged<EasyTransfer>.fromOpaque(userdata!).takeUnretainedValue()
                let accepted = transfer.receiveHeaderLine(UnsafeRawBufferPointer(start: pointer, count: size * count))
                return accepted ? size * count : 0
            }, "HEADERFUNCTION")
        try check(c_parley_easy_setopt_pointer(h, CURLOPT_WRITEDATA, me), "WRITEDATA")
        try check(
            c_parley_easy_setopt_data_cb(h, CURLOPT_WRITEFUNCTION) { pointer, size, count, userdata in
                let transfer = Unmanaged<EasyTransfer>.fromOpaque(userdata!).takeUnretainedValue()
                return transfer.receiveBody(UnsafeRawBufferPointer(start: pointer, count: size * count))
            }, "WRITEFUNCTION")

        // Method and request body.
        if request.isHead {
            try check(c_parley_easy_setopt_long(h, CURLOPT_NOBODY, 1), "NOBODY")
            return
        }
        try check(c_parley_easy_setopt_string(h, CURLOPT_CUSTOMREQUEST, request.method), "CUSTOMREQUEST")
        guard request.hasBody else { return }
        switch request.body {
        case .empty:
            break
        case .bytes(let bytes):
            uploadBytes = bytes
        case .file(let file, _), .stream(let file):
            guard file.descriptor >= 0 else {
                throw TransportError(.invalidRequest, detail: "\(request.host): request body file cannot be opened")
            }
            uploadFile = file  // its descriptor is owned by the BodyFile, which `request` keeps alive
        case .pipe:
            // A pipe cannot rewind, and curl rewinds a body to send it again when a reused
            // connection turns out to be closed: a new connection never needs that.
            try check(c_parley_easy_setopt_long(h, CURLOPT_FRESH_CONNECT, 1), "FRESH_CONNECT")
        }
        // A file or pipe body is large (an upload past the memory limit): curl reads and sends
        // it in 256 KiB instead of its default 64 KiB, a quarter of the reads and sends per GiB.
        if uploadFile != nil || uploadPipe != nil {
            try check(c_parley_easy_setopt_long(h, CURLOPT_UPLOAD_BUFFERSIZE, 256 * 1024), "UPLOAD_BUFFERSIZE")
        }
        try check(c_parley_easy_setopt_long(h, CURLOPT_UPLOAD, 1), "UPLOAD")
        // -1: the size is unknown, and curl sends the body with chunked coding (HTTP/1.1).
        try check(c_parley_easy_setopt_off(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(request.body.length ?? -1)), "INFILESIZE_LARGE")
        try check(c_parley_easy_setopt_pointer(h, CURLOPT_READDATA, me), "READDATA")
        try check(
            c_parley_easy_setopt_data_cb(h, CURLOPT_READFUNCTION) { pointer, size, count, userdata in
                let transfer = Unmanaged<EasyTransfer>.fromOpaque(userdata!).takeUnretainedValue()
                return transfer.sendBody(into: UnsafeMutableRawBufferPointer(start: pointer, count: size * count))
            }, "READFUNCTION")
        // Lets curl rewind the body when it resends on a fresh connection.
        try check(c_parley_easy_setopt_pointer(h, CURLOPT_SEEKDATA, me), "SEEKDATA")
        try check(
            c_parley_easy_setopt_seek_cb(h, CURLOPT_SEEKFUNCTION) { userdata, offset, origin in
                let transfer = Unmanaged<EasyTransfer>.fromOpaque(userdata!).takeUnretainedValue()
                return transfer.seekBody(to: offset, origin: origin)
            }, "SEEKFUNCTION")
    }

    private func setBlob(_ option: CURLoption, _ bytes: [UInt8], _ what: String) throws(TransportError) {
        // CURL_BLOB_COPY: curl keeps its own copy, nothing here must outlive the call.
        let code = bytes.withUnsafeBytes { raw -> CURLcode in
            var blob = curl_blob(data: UnsafeMutableRawPointer(mutating: raw.baseAddress), len: raw.count, flags: c_parley_blob_copy())
            return c_parley_easy_setopt_blob(handle, option, &blob)
        }
        try check(code, what)
    }

    static func milliseconds(_ d: Duration) -> Int {
        let (seconds, attoseconds) = d.components
        let ms = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int(max(1, ms))
    }

    static func wholeSeconds(_ d: Duration) -> Int {
        let (seconds, attoseconds) = d.components
        return Int(max(1, seconds + (attoseconds > 0 ? 1 : 0)))
    }

    // MARK: Callbacks (multi thread, inside curl calls)

    /// False aborts the transfer (curl reports a write error; `headFailure` says why).
    private func receiveHeaderLine(_ raw: UnsafeRawBufferPointer) -> Bool {
        if headDelivered { return true }  // trailers after a chunked body: not part of the head
        switch headParser.feed(line: raw) {
        case .needMore, .interim:
            return true
        case .head(let status, let headers):
            deliverHead(status: status, headers: headers)
            return true
        case .failed(let reason):
            headFailure = reason
            return false
        }
    }

    private func deliverHead(status: Int, headers: HeaderFields) {
        headDelivered = true
        logger.debug(
            "upstream response head",
            metadata: ["upstream.host": "\(request.host)", "http.status": "\(status)", "transfer.id": "\(state.id)"]
        )
        let body = ResponseBody(source: CurlBodySource(state: state))
        state.deliverHead(UpstreamResponse(status: status, headers: headers, body: body), wholeBodyLength: wholeBodyLength(status: status, headers: headers))
    }

    /// The length of a body small enough to hand over whole with its head (most API
    /// answers): announced by `Content-Length`, at most `wholeBodyBytes`. Nil for a body
    /// that streams, and for answers without one (HEAD, 204, 304).
    private func wholeBodyLength(status: Int, headers: HeaderFields) -> Int? {
        guard wholeBodyBytes > 0, !request.isHead, status != 204, status != 304,
            let text = headers["Content-Length"], !text.isEmpty, text.utf8.count <= 9,
            text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let length = Int(text), length <= wholeBodyBytes
        else { return nil }
        return length
    }

    private func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard headDelivered else {
            headFailure = headFailure ?? "the upstream sent a body without a complete response head"
            return 0
        }
        switch state.offer(bytes) {
        case .accepted: return bytes.count
        case .acceptedForWaiter:
            waiting.append(state)
            return bytes.count
        case .pause:
            if pausedSince == nil { pausedSince = .now }
            return c_parley_writefunc_pause()
        case .abort: return 0  // curl ends the transfer with CURLE_WRITE_ERROR
        }
    }

    private func sendBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        if let pipe = uploadPipe {
            let state = self.state
            switch pipe.read(into: buffer, wake: { state.resumeUpload() }) {
            case .bytes(let n):
                uploadOffset += n
                return n
            case .end: return 0
            case .wait: return c_parley_readfunc_pause()  // `wake` resumes it
            case .failed: return c_parley_readfunc_abort()
            }
        }
        if let file = uploadFile {
            var count = buffer.count
            let state = self.state
            switch file.readable(from: Int64(uploadOffset), wake: { state.resumeUpload() }) {
            case .toEnd: break
            case .upTo(let end): count = Int(min(Int64(count), end - Int64(uploadOffset)))
            case .wait: return c_parley_readfunc_pause()  // `wake` resumes it
            case .failed: return c_parley_readfunc_abort()
            }
            while true {
                let n = pread(file.descriptor, base, count, off_t(uploadOffset))
                if n >= 0 {
                    uploadOffset += n
                    return n
                }
                if errno != EINTR { return c_parley_readfunc_abort() }
            }
        }
        let n = min(buffer.count, uploadBytes.count - uploadOffset)
        if n > 0 {
            uploadBytes.withUnsafeBytes { source in
                base.copyMemory(from: source.baseAddress! + uploadOffset, byteCount: n)
            }
            uploadOffset += n
        }
        return n
    }

    private func seekBody(to offset: curl_off_t, origin: Int32) -> Int32 {
        // A stream's end is not known yet: reading from any offset waits for its bytes.
        guard origin == SEEK_SET, offset >= 0, Int64(offset) <= request.body.length ?? Int64.max else { return c_parley_seekfunc_fail() }
        // A pipe keeps nothing: it can only "rewind" to where it stands, before its first read.
        if uploadPipe != nil { return offset == 0 && uploadOffset == 0 ? c_parley_seekfunc_ok() : c_parley_seekfunc_fail() }
        uploadOffset = Int(offset)
        return c_parley_seekfunc_ok()
    }
}
