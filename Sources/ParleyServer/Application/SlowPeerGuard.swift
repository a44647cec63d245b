import NIOCore
import NIOHTTPTypes
import ParleyDomain

/// Closes client connections that hold a server slot without making progress
/// (slowloris): the request head must be complete within `headTimeout` of the
/// connection opening or of the previous response ending (a trickled head never
/// resets the clock), and a request body must not stall for `bodyIdleTimeout`.
/// While a request is being answered (a long-poll included) no clock runs.
/// Sits after the HTTP codec; every method runs on the channel's event loop.
final class SlowPeerGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let headTimeout: TimeAmount
    private let bodyIdleTimeout: TimeAmount
    /// When the connection is closed unless progress moves it; nil while no clock runs.
    private var deadline: NIODeadline?
    /// The one scheduled check and when it runs. Moving the deadline later leaves it as it
    /// is (it looks again when it runs), so a request costs no timer scheduling of its own.
    private var timer: Scheduled<Void>?
    private var timerRuns: NIODeadline?
    private var readingBody = false

    init(headTimeout: Duration, bodyIdleTimeout: Duration) {
        self.headTimeout = Self.amount(headTimeout)
        self.bodyIdleTimeout = Self.amount(bodyIdleTimeout)
    }

    static func amount(_ d: Duration) -> TimeAmount {
        let (seconds, attoseconds) = d.components
        return .nanoseconds(min(seconds, 86_400 * 365) * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(headTimeout, context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { stop() }

    func channelActive(context: ChannelHandlerContext) {
        arm(headTimeout, context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            readingBody = true
            arm(bodyIdleTimeout, context: context)
        case .body:
            if readingBody { arm(bodyIdleTimeout, context: context) }
        case .end:
            readingBody = false
            disarm()
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), !readingBody {
            // The exchange is over: the next request's head has its own deadline.
            arm(headTimeout, context: context)
        }
        context.write(data, promise: promise)
    }

    private func arm(_ timeout: TimeAmount, context: ChannelHandlerContext) {
        let deadline = NIODeadline.now() + timeout
        self.deadline = deadline
        if timer != nil, let timerRuns, timerRuns <= deadline { return }
        schedule(at: deadline, context: context)
    }

    private func schedule(at when: NIODeadline, context: ChannelHandlerContext) {
        timer?.cancel()
        timerRuns = when
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: when) {
            self.timer = nil
            self.timerRuns = nil
            guard let deadline = self.deadline else { return }
            if NIODeadline.now() >= deadline {
                context.close(promise: nil)
            } else {
                self.schedule(at: deadline, context: context)
            }
        }
    }

    /// No clock runs; a scheduled check finds nothing to do.
    private func disarm() {
        deadline = nil
    }

    private func stop() {
        deadline = nil
        timer?.cancel()
        timer = nil
        timerRuns = nil
    }
}
