"""Server-sent events: one `data:` line per JSON chunk (OpenAI chat: `data: [DONE]` at the end;
Anthropic and Responses: each chunk named by an `event:` line)."""

from __future__ import annotations

import json

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# Characters JSON may leave raw but that Python's str.splitlines() (and clients built on it, such
# as httpx's aiter_lines) treat as line breaks, which would cut a `data:` line in two.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dumps(obj: object) -> str:
    """Compact JSON; non-ASCII kept as is (UTF-8 on the wire) except the few characters some
    clients split lines on, which are escaped."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS)


def event(obj: object) -> bytes:
    return b"data: " + dumps(obj).encode() + b"\n\n"


def named_event(name: str, obj: object) -> bytes:
    """One SSE event with an `event:` line (Anthropic's SDK skips events without one)."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj).encode() + b"\n\n"
