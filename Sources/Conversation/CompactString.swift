extension String {
    /// The same text in storage of its own length (or inline, up to 15 bytes). A string built
    /// by interpolation or `joined` keeps the capacity reserved while building it, often twice
    /// its length; one kept for long, a cache's key or value for each registration, need not.
    public var compacted: String {
        var copy = self
        return copy.withUTF8 { String(decoding: $0, as: UTF8.self) }
    }
}
