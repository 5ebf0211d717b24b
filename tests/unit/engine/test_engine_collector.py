"""Collector and handle: merged deltas, one FinishEvent, sync and async wake-ups."""

from __future__ import annotations

import asyncio
import threading

from mlxd.engine.collector import Collector
from mlxd.engine.handle import RequestHandle
from mlxd.engine.request import Request
from mlxd.types import FinishEvent, FinishReason, SamplingParams, TokenEvent, TokenLogprob, Usage

FIN = FinishEvent(FinishReason.LENGTH, Usage(1, 3))


def test_slow_consumer_gets_one_merged_delta_then_finish() -> None:
    c = Collector()
    for t in (5, 6, 7):
        c.push(t, TokenLogprob(t, -0.5))
    assert c.finish(FIN) is True
    assert c.finish(FinishEvent(FinishReason.ERROR, Usage())) is False  # first wins
    c.push(8, None)  # after finish: dropped
    events = c.poll()
    assert events == [TokenEvent((5, 6, 7), tuple(TokenLogprob(t, -0.5) for t in (5, 6, 7))), FIN]
    assert c.poll() == [] and c.done


def test_take_times_out_empty() -> None:
    assert Collector().take(timeout=0.01) == []


def test_sync_consumer_wakes_from_another_thread() -> None:
    c = Collector()

    def produce() -> None:
        for t in range(20):
            c.push(t, None)
        c.finish(FIN)

    threading.Thread(target=produce).start()
    tokens: list[int] = []
    while not c.done:
        for event in c.take():
            if isinstance(event, TokenEvent):
                tokens.extend(event.token_ids)
    assert tokens == list(range(20))


def test_async_consumer_wakes_from_another_thread() -> None:
    c = Collector()

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: threading.Thread(target=produce).start())
        tokens: list[int] = []
        while not c.done:
            for event in await c.take_async():
                if isinstance(event, TokenEvent):
                    tokens.extend(event.token_ids)
        return tokens

    def produce() -> None:
        for t in range(20):
            c.push(t, None)
        c.finish(FIN)

    assert asyncio.run(main()) == list(range(20))


def test_handle_cancel_is_idempotent_and_skipped_after_finish() -> None:
    sent: list[str] = []
    req = Request("r1", "m", [1], SamplingParams(), 3, Collector())
    handle = RequestHandle(req, sent.append)
    handle.cancel()
    handle.cancel()
    assert sent == ["r1"]
    req2 = Request("r2", "m", [1], SamplingParams(), 3, Collector())
    req2.collector.finish(FIN)
    RequestHandle(req2, sent.append).cancel()
    assert sent == ["r1"]


def test_closing_the_iterator_early_cancels() -> None:
    sent: list[str] = []
    req = Request("r1", "m", [1], SamplingParams(), 3, Collector())
    req.collector.push(1, None)
    handle = RequestHandle(req, sent.append)
    for _ in handle:
        break
    assert sent == ["r1"]
