/// How the edge names an error in the contract's words: its problem code (a metric label, the
/// audit log's `code`), and whether it is an answer Parley gives on purpose (an interaction, a
/// refusal, a limit) rather than a failure of the upstream. The edge's one error mapping supplies
/// it (`compose`), so the domain names no HTTP type and the mapping is written once.
package struct ErrorNames: Sendable {
    package let code: @Sendable (any Error) -> String
    package let isAnswer: @Sendable (any Error) -> Bool

    package init(code: @escaping @Sendable (any Error) -> String, isAnswer: @escaping @Sendable (any Error) -> Bool) {
        self.code = code
        self.isAnswer = isAnswer
    }
}
