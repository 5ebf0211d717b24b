"""Cancel in every state: queued, prefilling, decoding; by cancel(), break, task cancel."""

from __future__ import annotations

import asyncio
import time

from mlxd.engine import Engine, ModelInfo, RequestHandle, RequestStatus
from mlxd.types import FinishReason, TokenEvent

from .engine_helpers import random_prompts, request


def wait_finished(handle: RequestHandle) -> None:
    while not handle.finished:
        time.sleep(0.005)


def test_cancel_queued_then_decoding_frees_the_slot(make_engine, tiny_chat_model) -> None:
    engine = make_engine(max_batch=1)
    info = engine.load_model(tiny_chat_model)
    long = engine.submit(request(info, [60, 61], max_tokens=2000, ignore_eos=True))
    events = iter(long)
    assert isinstance(next(events), TokenEvent)  # long now holds the only slot
    queued = engine.submit(request(info, [62, 63], max_tokens=5))
    assert queued.status is RequestStatus.WAITING
    queued.cancel()
    queued.cancel()  # idempotent
    tokens, fin = queued.collect()
    assert (tokens, fin.reason, fin.usage.completion_tokens) == ([], FinishReason.CANCELLED, 0)
    assert long.status is RequestStatus.DECODING
    long.cancel()
    rest = list(events)
    assert rest[-1].reason is FinishReason.CANCELLED
    assert 0 < rest[-1].usage.completion_tokens < 2000
    after = engine.submit(request(info, [62, 63], max_tokens=5, ignore_eos=True))
    assert len(after.collect()[0]) == 5
    stats = engine.stats()
    assert (stats.running, stats.waiting, stats.kv_tokens_in_use) == (0, 0, 0)
    assert stats.counters.by_reason["cancelled"] == 2


def test_cancel_while_prefilling(make_engine, tiny_chat_model) -> None:
    holder: list[RequestHandle] = []
    seen: list[RequestStatus] = []

    def hook(site: str, request_id: str | None) -> None:
        # Runs on the engine thread at each step boundary: cancel mid-prefill, exactly.
        if site == "step" and holder and not seen:
            if holder[0].status is RequestStatus.PREFILLING:
                seen.append(holder[0].status)
                holder[0].cancel()

    engine = make_engine(prefill_chunk=8, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    prompt = random_prompts(1, info.vocab_size, (400, 401), seed=7)[0]
    holder.append(engine.submit(request(info, prompt, max_tokens=5)))
    tokens, fin = holder[0].collect()
    assert seen == [RequestStatus.PREFILLING]
    assert (tokens, fin.reason, fin.usage.completion_tokens) == ([], FinishReason.CANCELLED, 0)
    # The partial prefill was kept for reuse; output still equals a cold engine's.
    again = engine.submit(request(info, prompt, max_tokens=5)).collect()
    cold = make_engine(prefix_cache_bytes=0)
    cold.load_model(tiny_chat_model)
    assert again[1].usage.cached_tokens > 0
    assert again[0] == cold.submit(request(info, prompt, max_tokens=5)).collect()[0]


def test_breaking_out_of_iteration_cancels(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    handle = engine.submit(request(info, [70, 71], max_tokens=2000, ignore_eos=True))
    for event in handle:
        assert isinstance(event, TokenEvent)
        break
    wait_finished(handle)
    assert engine.stats().counters.by_reason["cancelled"] == 1
    assert engine.stats().running == 0


def test_async_task_cancellation_cancels(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    handle = engine.submit(request(info, [72, 73], max_tokens=2000, ignore_eos=True))

    async def main() -> None:
        got_token = asyncio.Event()

        async def consume() -> None:
            async for event in handle:
                if isinstance(event, TokenEvent):
                    got_token.set()

        task = asyncio.create_task(consume())
        await got_token.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    wait_finished(handle)
    assert engine.stats().counters.by_reason["cancelled"] == 1


def test_cancel_after_finish_is_a_no_op(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    handle = engine.submit(request(info, [74], max_tokens=3, ignore_eos=True))
    tokens, fin = handle.collect()
    handle.cancel()
    assert fin.reason is FinishReason.LENGTH and len(tokens) == 3
    assert list(handle) == []


def test_cancel_mid_decode_loses_no_step_of_the_rows_that_stay(
    make_engine, tiny_chat_model
) -> None:
    """Each decode step leaves the next one in flight (sampled, not yet emitted). Cancelling
    rows then (exactly at a step boundary, from the engine thread) drops only theirs: the
    rows that stay, greedy and seeded, go on exactly as alone, also once one row is left
    alone (its unmasked single-row step); a cancelled row got a prefix of its answer alone,
    and its usage counts what it was sent."""
    handles: list[RequestHandle] = []
    steps = [0]

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and len(handles) == 3:
            steps[0] += 1
            cut = {6: 1, 11: 2}.get(steps[0])  # step boundaries with every row decoding
            if cut is not None:
                handles[cut].cancel()

    engine = make_engine(max_batch=4, prefix_cache_bytes=0, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    prompts = random_prompts(3, info.vocab_size, (5, 30), seed=11)
    params = [
        dict(max_tokens=30, ignore_eos=True),
        dict(max_tokens=30, ignore_eos=True),
        dict(max_tokens=30, ignore_eos=True, temperature=0.8, seed=5),
    ]
    alone = [
        engine.submit(request(info, p, **kw)).collect()[0]
        for p, kw in zip(prompts, params, strict=True)
    ]
    handles.extend(
        engine.submit(request(info, p, **kw)) for p, kw in zip(prompts, params, strict=True)
    )
    (first, _), (second, cut_b), (third, cut_c) = (h.collect() for h in handles)
    assert first == alone[0] and len(first) == 30
    assert (cut_b.reason, cut_c.reason) == (FinishReason.CANCELLED, FinishReason.CANCELLED)
    assert 0 < len(second) < len(third) < 30
    assert second == alone[1][: len(second)] and third == alone[2][: len(third)]
    assert (cut_b.usage.completion_tokens, cut_c.usage.completion_tokens) == (
        len(second),
        len(third),
    )
