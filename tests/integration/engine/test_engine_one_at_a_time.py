"""A model whose cache the batch cannot merge (llama4's ChunkedKVCache): served one request at
a time, each answer what it is alone; the others wait and start as the row ends."""

from __future__ import annotations

from pathlib import Path

from mlxd.engine import RequestStatus
from mlxd.types import FinishReason, TokenEvent

from .engine_helpers import random_prompts, request


def mlx_lm_greedy(path: Path, prompt: list[int], n: int) -> list[int]:
    """mlx-lm's own one-sequence greedy generation (its caches, no batch)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model

    model, _ = load_model(path)
    steps = generate_step(mx.array(prompt), model, max_tokens=n)
    return [int(token) for token, _ in steps]


def test_load_finds_the_cache_the_batch_cannot_hold(
    make_engine, tiny_chunked_model, tiny_chat_model
) -> None:
    engine = make_engine()
    assert engine.load_model(tiny_chunked_model).unbatchable == ("ChunkedKVCache",)
    assert engine.load_model(tiny_chat_model).unbatchable == ()


def test_concurrent_requests_each_answer_as_alone(make_engine, tiny_chunked_model) -> None:
    engine = make_engine(prefill_chunk=8)
    info = engine.load_model(tiny_chunked_model)
    # Longer than a chunk of attention (8) and of prefill: both cross several.
    prompts = random_prompts(3, info.vocab_size, (20, 30), seed=3)
    params = dict(max_tokens=24, ignore_eos=True)
    alone = [engine.submit(request(info, p, **params)).collect()[0] for p in prompts]
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    assert [h.collect()[0] for h in handles] == alone
    assert len({tuple(tokens) for tokens in alone}) == 3
    assert alone[0] == mlx_lm_greedy(tiny_chunked_model, prompts[0], 24)
    stats = engine.stats()
    assert (stats.running, stats.waiting) == (0, 0)


def test_one_row_runs_the_rest_wait_and_cancel_frees_it(make_engine, tiny_chunked_model) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chunked_model)
    first = engine.submit(request(info, [60, 61, 62], max_tokens=2000, ignore_eos=True))
    events = iter(first)
    assert isinstance(next(events), TokenEvent)
    second = engine.submit(request(info, [63, 64], max_tokens=5, ignore_eos=True))
    third = engine.submit(request(info, [65, 66], max_tokens=3, ignore_eos=True))
    assert isinstance(next(events), TokenEvent)  # a step ran: the others were not admitted
    assert (second.status, third.status) == (RequestStatus.WAITING, RequestStatus.WAITING)
    assert engine.stats().running == 1
    first.cancel()
    assert list(events)[-1].reason is FinishReason.CANCELLED
    tokens, fin = second.collect()
    assert (len(tokens), fin.reason) == (5, FinishReason.LENGTH)
    tokens, fin = third.collect()
    assert (len(tokens), fin.reason) == (3, FinishReason.LENGTH)


def test_stop_token_ends_the_row(make_engine, tiny_chunked_model) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chunked_model)
    prompt = [70, 71, 72, 73]
    tokens, _ = engine.submit(request(info, prompt, max_tokens=6, ignore_eos=True)).collect()
    stop = tokens[2]
    cut, fin = engine.submit(
        request(info, prompt, max_tokens=6, ignore_eos=True, stop_token_ids=[stop])
    ).collect()
    assert fin.reason is FinishReason.STOP
    assert cut == tokens[: tokens.index(stop)]  # the stop token itself is not output


def test_prefix_cache_on_stores_nothing(make_engine, tiny_chunked_model) -> None:
    engine = make_engine(prefix_cache_bytes=1 << 24)
    info = engine.load_model(tiny_chunked_model)
    prompt = random_prompts(1, info.vocab_size, (30, 31), seed=5)[0]
    first = engine.submit(request(info, prompt, max_tokens=8)).collect()
    again = engine.submit(request(info, prompt, max_tokens=8)).collect()
    assert again[0] == first[0]
    assert again[1].usage.cached_tokens == 0  # its snapshots would need the batch's extract
