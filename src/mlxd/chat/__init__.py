"""The chat layer: messages -> template -> token ids (builder), token ids -> text, reasoning
and tool calls (filter over the pure parser), one option table (options), and the driver the
server and the CLI share (session)."""
