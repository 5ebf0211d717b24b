"""Generation on a real tiny checkpoint: greedy parity, stops, budgets, logprobs, async."""

from __future__ import annotations

import asyncio
import time

import pytest

from mlxd.engine import Engine, ModelInfo, RequestHandle, RequestStatus
from mlxd.types import FinishReason, TokenEvent

from . import engine_helpers
from .engine_helpers import collect_events, random_prompts, request


@pytest.mark.parametrize("checkpoint", ["tiny_chat_model", "tiny_quant_model"])
def test_greedy_alone_equals_inside_batch_of_8(
    make_engine, checkpoint: str, request: pytest.FixtureRequest
) -> None:
    engine = make_engine()
    info = engine.load_model(request.getfixturevalue(checkpoint))
    prompts = random_prompts(8, info.vocab_size, (3, 120), seed=1)
    params = dict(max_tokens=24, ignore_eos=True)
    make = engine_helpers.request  # `request` is pytest's fixture here
    alone = [engine.submit(make(info, p, **params)).collect()[0] for p in prompts]
    handles = [engine.submit(make(info, p, **params)) for p in prompts]
    batched = [h.collect()[0] for h in handles]
    assert all(len(t) == 24 for t in alone)
    assert batched == alone
    assert len({tuple(t) for t in alone}) > 1  # the prompts really steer the output


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_greedy_alone_equals_inside_batch_in_half_precision(
    make_engine, dtype: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Half-precision weights (as most published MLX models): batching changes matmul shapes
    and adds left padding, yet greedy output stays byte for byte the same."""
    from tests.checkpoints import make_checkpoint

    checkpoint = make_checkpoint(tmp_path_factory.mktemp(dtype), "chat", dtype=dtype)
    engine = make_engine()
    info = engine.load_model(checkpoint)
    prompts = random_prompts(8, info.vocab_size, (3, 120), seed=1)
    alone = [
        engine.submit(request(info, p, max_tokens=24, ignore_eos=True)).collect()[0]
        for p in prompts
    ]
    handles = [engine.submit(request(info, p, max_tokens=24, ignore_eos=True)) for p in prompts]
    assert [h.collect()[0] for h in handles] == alone
    assert len({tuple(t) for t in alone}) > 1


def test_greedy_parity_with_prefix_cache_and_batched_prefill(make_engine, tiny_chat_model) -> None:
    """Same tokens whatever the engine layout: cold, prefix-cached, or prompts prefilled
    side by side in one padded batch."""
    ref_engine = make_engine(prefix_cache_bytes=0, max_batch=1)
    info = ref_engine.load_model(tiny_chat_model)
    prompts = random_prompts(4, info.vocab_size, (5, 60), seed=2)
    expected = [ref_engine.submit(request(info, p, max_tokens=16)).collect()[0] for p in prompts]
    wide = make_engine(prefill_batch=4, prefill_chunk=16)
    wide.load_model(tiny_chat_model)
    for _ in range(2):  # the second round hits the prefix cache
        handles = [wide.submit(request(info, p, max_tokens=16)) for p in prompts]
        assert [h.collect()[0] for h in handles] == expected
    assert wide.stats().counters.prefix_cache_hits >= 4


def test_eos_stops_and_is_not_emitted(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompt = random_prompts(1, info.vocab_size, (4, 8), seed=3)[0]
    free = engine.submit(request(info, prompt, max_tokens=12, ignore_eos=True)).collect()[0]
    stop_at = free[5]
    tokens, fin = engine.submit(
        request(info, prompt, max_tokens=12, stop_token_ids=(stop_at,))
    ).collect()
    cut = free.index(stop_at)
    assert fin.reason is FinishReason.STOP
    assert tokens == free[:cut]
    assert fin.usage.completion_tokens == cut + 1  # the stop token counts as generated


def test_ignore_eos_keeps_going_past_eos(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    eos = next(iter(info.eos_token_ids))
    # A strong bias makes eos the greedy choice at every step.
    biased = dict(max_tokens=6, logit_bias=((eos, 100.0),))
    tokens, fin = engine.submit(request(info, [20, 21, 22], **biased)).collect()
    assert (tokens, fin.reason) == ([], FinishReason.STOP)
    tokens, fin = engine.submit(request(info, [20, 21, 22], ignore_eos=True, **biased)).collect()
    assert (tokens, fin.reason) == ([eos] * 6, FinishReason.LENGTH)


def test_budget_rule_min_of_max_tokens_ceiling_window(make_engine, tiny_chat_model) -> None:
    engine = make_engine(max_tokens_ceiling=7)
    info = engine.load_model(tiny_chat_model)
    p = [30, 31, 32]
    cases = [
        (dict(max_tokens=5), 5),
        (dict(max_tokens=3), 3),
        (dict(max_tokens=9), 7),
        (dict(), 7),
    ]
    for params, expected in cases:
        tokens, fin = engine.submit(request(info, p, ignore_eos=True, **params)).collect()
        assert (len(tokens), fin.reason) == (expected, FinishReason.LENGTH), params
    window = info.context_window
    long_prompt = random_prompts(1, info.vocab_size, (window - 4, window - 3), seed=4)[0]
    handle = engine.submit(request(info, long_prompt, ignore_eos=True))
    tokens, fin = handle.collect()
    assert handle.max_tokens == len(tokens) == 4
    assert fin.usage.prompt_tokens + fin.usage.completion_tokens == window


def test_logprobs_and_top_logprobs(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    events, fin = collect_events(
        engine.submit(
            request(
                info, [40, 41, 42], max_tokens=5, logprobs=True, top_logprobs=3, ignore_eos=True
            )
        )
    )
    lps = [lp for e in events for lp in e.logprobs]
    ids = [t for e in events for t in e.token_ids]
    assert [lp.token_id for lp in lps] == ids and len(ids) == 5
    for lp in lps:
        assert lp.logprob <= 0.0
        assert len(lp.top) == 3
        assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)
        assert lp.top[0] == (lp.token_id, pytest.approx(lp.logprob))  # greedy picks the best
    plain, _ = collect_events(engine.submit(request(info, [40, 41, 42], max_tokens=5)))
    assert all(e.logprobs == () for e in plain)


def test_slow_consumer_gets_merged_deltas(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    handle = engine.submit(request(info, [50, 51], max_tokens=20, ignore_eos=True))
    while not handle.finished:  # let the engine run ahead of us
        time.sleep(0.005)
    events, fin = collect_events(handle)
    assert len(events) == 1 and len(events[0].token_ids) == 20
    assert fin.usage.completion_tokens == 20


def test_async_iteration_does_not_block_the_loop(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompts = random_prompts(3, info.vocab_size, (4, 30), seed=5)
    expected = [engine.submit(request(info, p, max_tokens=10)).collect()[0] for p in prompts]

    async def consume(prompt: list[int]) -> list[int]:
        out: list[int] = []
        async for event in engine.submit(request(info, prompt, max_tokens=10)):
            if isinstance(event, TokenEvent):
                out.extend(event.token_ids)
        return out

    async def main() -> tuple[list[list[int]], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(consume(p) for p in prompts))
        done.set()
        await tick_task
        return list(results), ticks

    results, ticks = asyncio.run(main())
    assert results == expected
    assert ticks > 1  # the loop kept running other tasks while we waited for tokens


def staggered_start(make_engine, checkpoint, prompt_len: int, **cfg) -> bool:
    """Did the first of 3 concurrent requests decode while the third still waited/prefilled?"""
    handles: list[RequestHandle] = []
    seen: list[bool] = []

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and len(handles) == 3:
            first, last = handles[0].status, handles[2].status
            early = (RequestStatus.WAITING, RequestStatus.PREFILLING)
            seen.append(first is RequestStatus.DECODING and last in early)

    engine = make_engine(fault_hook=hook, **cfg)
    info = engine.load_model(checkpoint)
    prompts = random_prompts(3, info.vocab_size, (prompt_len, prompt_len + 1), seed=20)
    handles.extend(engine.submit(request(info, p, max_tokens=40, ignore_eos=True)) for p in prompts)
    assert all(len(h.collect()[0]) == 40 for h in handles)
    return any(seen)


def test_long_prompts_prefill_first_come_first_served(make_engine, tiny_chat_model) -> None:
    """Long prompts prefill one at a time (in chunks), so the first request decodes while
    later prompts still prefill; a whole-wave prefill starts everyone together."""
    assert staggered_start(make_engine, tiny_chat_model, 200, prefill_chunk=16) is True
    wave = dict(prefill_chunk=16, prefill_batch=3, prefill_group_tokens=0)
    assert staggered_start(make_engine, tiny_chat_model, 200, **wave) is False


def test_short_prompts_prefill_together(make_engine, tiny_chat_model) -> None:
    """A burst of short prompts (3 x 20 tokens within prefill_group_tokens) starts together."""
    assert staggered_start(make_engine, tiny_chat_model, 20) is False
    assert staggered_start(make_engine, tiny_chat_model, 20, prefill_group_tokens=40) is True
