"""sse.paced: a tick (None) for every idle interval, items in order, and the wait for the next
item never cancelled by a tick (only by closing the iterator)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mlxd.server.sse import paced


def test_ticks_while_idle_and_keeps_items_in_order() -> None:
    async def scenario() -> tuple[list[int | None], bool]:
        release = asyncio.Event()
        cancelled = False

        async def items() -> AsyncIterator[int]:
            nonlocal cancelled
            yield 1
            try:
                await release.wait()  # idle: ticks go out meanwhile
            except asyncio.CancelledError:
                cancelled = True
                raise
            yield 2

        out: list[int | None] = []
        async for item in paced(items(), 0.001):
            out.append(item)
            if out.count(None) == 3:
                release.set()
        return out, cancelled

    out, cancelled = asyncio.run(scenario())
    assert out[0] == 1 and out[-1] == 2 and out[1:-1] == [None] * (len(out) - 2)
    assert len(out) >= 5 and not cancelled


def test_closing_cancels_the_wait_and_zero_never_ticks() -> None:
    async def scenario() -> tuple[bool, list[int | None]]:
        cancelled = asyncio.Event()

        async def forever() -> AsyncIterator[int]:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            yield 0

        ticks = paced(forever(), 0.001)
        assert await anext(ticks) is None
        await ticks.aclose()
        await asyncio.sleep(0)

        async def three() -> AsyncIterator[int]:
            for i in range(3):
                yield i

        return cancelled.is_set(), [x async for x in paced(three(), 0)]

    cancelled, plain = asyncio.run(scenario())
    assert cancelled and plain == [0, 1, 2]
