import HTTPTypes
import NIOCore
import NIOHTTPTypes
import ParleyDomain

/// Answers `Expect: 100-continue` with `100 Continue` as soon as the request head is
/// read. Clients that ask (curl does for bodies over 1 MiB, and so do many HTTP
/// libraries) hold the body back until they see it, or until their own timeout passes
/// (a second for curl). The final answer follows as usual, after or instead of the body.
/// Sits after the HTTP codec; every method runs on the channel's event loop.
final class ContinueResponder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), Self.expectsContinue(head) {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }

    static func expectsContinue(_ head: HTTPRequest) -> Bool {
        head.headerFields[values: .expect].contains { $0.lowercased() == "100-continue" }
    }
}
