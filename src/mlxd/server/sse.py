"""Server-sent events: one `data:` line per JSON chunk (OpenAI chat: `data: [DONE]` at the end;
Anthropic and Responses: each chunk named by an `event:` line), and `paced`, which says when a
stream has had nothing to send for a while (its keep-alive is due)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")

DONE = b"data: [DONE]\n\n"
COMMENT_KEEP_ALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it
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


async def paced(items: AsyncIterator[T], idle_s: float) -> AsyncIterator[T | None]:
    """`items`, with a None after every `idle_s` seconds in which none came (0: never).

    The wait for the next item is never cancelled by a tick (cancelling it would cancel the
    generation); closing this iterator cancels it."""
    if idle_s <= 0:
        async for item in items:
            yield item
        return
    pending: asyncio.Future[T] = asyncio.ensure_future(anext(items))
    try:
        while True:
            done, _ = await asyncio.wait((pending,), timeout=idle_s)
            if not done:
                yield None
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            yield item
            pending = asyncio.ensure_future(anext(items))
    finally:
        pending.cancel()
