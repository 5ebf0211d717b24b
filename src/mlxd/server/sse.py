"""Server-sent events: one `data:` line per JSON chunk (OpenAI chat: `data: [DONE]` at the end;
Anthropic and Responses: each chunk named by an `event:` line)."""

from __future__ import annotations

import json

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def dumps(obj: object) -> str:
    """Compact JSON; non-ASCII kept as is (UTF-8 on the wire)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def event(obj: object) -> bytes:
    return b"data: " + dumps(obj).encode() + b"\n\n"


def named_event(name: str, obj: object) -> bytes:
    """One SSE event with an `event:` line (Anthropic's SDK skips events without one)."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj).encode() + b"\n\n"
