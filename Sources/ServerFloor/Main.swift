import Conversation
import CurlTransport
import Glibc
import Hummingbird
import HummingbirdCore
import LoopAffinity
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// `server-floor MODE PORT [UPSTREAM_URL [transport|loop]]`: the floors under a proxied request,
/// for `make bench`.
///
/// Serves `GET /floor` on 127.0.0.1:PORT with the least a proxy does: with an upstream URL it
/// fetches that URL and answers with the upstream's status and body; without one it answers
/// `200 ok`. The fetch goes through `CurlTransport` (`transport`, the default: Parley's libcurl
/// transport, its thread and hand-back) or through libcurl driven on the connection's own event
/// loop (`loop`: `LoopCurl`, the design Parley does not use, measured beside it). MODE is
/// the server side: `nio` (NIO's HTTP/1.1 pipeline, each request answered from a task on its
/// connection's loop, as Parley's handlers run) or `hummingbird` (a router with one route and the
/// connection kept on its loop, as Parley serves). No registration, no filters, no middleware:
/// what Parley adds is the difference between these and its own figures.
@main struct Main {
    static func main() async throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard (2...4).contains(arguments.count), let server = Server(rawValue: arguments[0]),
            let port = Int(arguments[1]), (1...65535).contains(port), arguments.count < 4 || ["transport", "loop"].contains(arguments[3])
        else {
            let usage = "usage: server-floor nio|hummingbird PORT [UPSTREAM_URL [transport|loop]]\n"
            _ = usage.withCString { write(2, $0, strlen($0)) }
            exit(64)
        }
        let logger = Logger(label: "server-floor")
        let answer: Answer =
            switch (arguments.count >= 3 ? arguments[2] : nil, arguments.count == 4 ? arguments[3] : "transport") {
            case (nil, _): .fixed
            case (let url?, "loop"): .loop(url: url)
            case (let url?, _): .transport(CurlTransport(logger: logger), url: url)
            }
        switch server {
        case .nio: try await serveOnNIO(port: port, answer: answer)
        case .hummingbird: try await serveOnHummingbird(port: port, answer: answer, logger: logger)
        }
    }

    enum Server: String { case nio, hummingbird }

    static func serveOnNIO(port: Int, answer: Answer) async throws {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withPipeliningAssistance: false)
                    try channel.pipeline.syncOperations.addHandler(FloorHandler(answer: answer))
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        print("server-floor: nio on \(port)")
        try await channel.closeFuture.get()
    }

    static func serveOnHummingbird(port: Int, answer: Answer, logger: Logger) async throws {
        let router = Router()
        router.get("/floor") { _, _ -> Response in
            let (status, body) = await answer.make()
            return Response(
                status: .init(code: status), headers: [.contentLength: "\(body.count)"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        let app = Application(
            router: router, server: .http1OnItsLoop(configuration: .init()), configuration: .init(address: .hostname("127.0.0.1", port: port)),
            onServerRunning: { _ in print("server-floor: hummingbird on \(port)") }, logger: logger)
        try await app.runService()
    }
}

/// What `/floor` answers: a fixed `200 ok`, or the upstream's status and body fetched one
/// of two ways.
enum Answer: Sendable {
    case fixed
    /// Through Parley's libcurl transport, its thread and hand-back.
    case transport(CurlTransport, url: String)
    /// Through libcurl driven on the connection's own event loop (`LoopCurl`).
    case loop(url: String)

    func make() async -> (status: Int, body: [UInt8]) {
        switch self {
        case .fixed:
            return (200, Array("ok".utf8))
        case .transport(let transport, let url):
            do {
                let response = try await transport.send(UpstreamRequest(method: "GET", url: url))
                return (response.status, try await response.body.collect(upTo: 1 << 20))
            } catch {
                return (502, Array("\(error)".utf8))
            }
        case .loop(let url):
            // The task prefers its connection's loop, so it runs there.
            guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else { return (502, Array("not on an event loop".utf8)) }
            return await withCheckedContinuation { continuation in
                LoopCurl.for(loop).get(url) { continuation.resume(returning: ($0, $1)) }
            }
        }
    }
}

/// Answers each request once its end is read, from a task that prefers the connection's loop.
/// Reading goes on meanwhile (as on Hummingbird's channel, with no change of the socket's
/// registration per request); answers to pipelined requests are written in request order.
/// Its state is touched on the connection's loop only.
final class FloorHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let answer: Answer
    /// Answers not yet written, in request order; nil while one is being made.
    private var pending: [(status: Int, body: [UInt8])?] = []
    /// Requests answered since the connection opened: the index of `pending`'s first slot.
    private var written = 0

    init(answer: Answer) { self.answer = answer }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        let loop = context.eventLoop
        let slot = written + pending.count
        pending.append(nil)
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: loop)
        Task(executorPreference: EventLoopTaskExecutor.for(loop)) { [answer] in
            let made = await answer.make()
            loop.execute { bound.value.handler.finished(slot, made, context: bound.value.context) }
        }
    }

    private func finished(_ slot: Int, _ made: (status: Int, body: [UInt8]), context: ChannelHandlerContext) {
        let index = slot - written
        guard pending.indices.contains(index) else { return }
        pending[index] = made
        var flushed = false
        while let first = pending.first, let (status, body) = first {
            pending.removeFirst()
            written += 1
            var headers = HTTPHeaders()
            headers.add(name: "content-length", value: "\(body.count)")
            context.write(
                wrapOutboundOut(.head(.init(version: .http1_1, status: .init(statusCode: status), headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
            flushed = true
        }
        if flushed { context.flush() }
    }
}
