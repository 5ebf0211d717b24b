"""Admission by KV bytes (issue 30): each model's bytes per token measured from its caches,
requests admitted while the KV they can grow to fits the byte budget, a request that can
never fit refused at once with the numbers. Real forwards on tiny float32 checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine import RequestHandle, RequestStatus
from mlxd.errors import InvalidRequest
from tests.checkpoints import make_checkpoint

from .conftest import EngineFactory
from .engine_helpers import random_prompts, request


def test_bytes_per_token_follow_layers_heads_dims_and_bits(
    make_engine: EngineFactory, tiny_chat_model: Path, checkpoints_dir: Path
) -> None:
    info = make_engine().load_model(tiny_chat_model)
    # 2 layers x (keys + values) x 2 KV heads x head dim 16 x float32
    assert (info.kv.per_token, info.kv.windows, info.kv.fixed) == (2 * 2 * 2 * 16 * 4, (), 0)
    medium = make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium")
    full = make_engine().load_model(medium).kv.per_token
    assert full == 4 * 2 * 2 * 64 * 4
    # 8 bits: 64 values in 16 words, a float32 scale and bias: 72 bytes per head and position
    assert make_engine(kv_bits=8).load_model(medium).kv.per_token == 4 * 2 * 2 * 72
    assert make_engine(kv_bits=4).load_model(medium).kv.per_token == 4 * 2 * 2 * 40


def test_sliding_windows_and_recurrent_state(
    make_engine: EngineFactory, tiny_sliding_model: Path, tiny_hybrid_model: Path
) -> None:
    sliding = make_engine().load_model(tiny_sliding_model).kv
    assert len(sliding.windows) == 1 and sliding.windows[0][0] == 16  # SLIDING_WINDOW
    assert sliding.per_token > 0 and sliding.bytes_for(1000) < 1000 * sliding.bytes_per_token
    hybrid = make_engine().load_model(tiny_hybrid_model).kv
    assert hybrid.fixed > 0 and hybrid.per_token > 0 and hybrid.bytes_for(0) == hybrid.fixed


def test_the_9th_long_request_waits_then_completes(
    make_engine: EngineFactory, tiny_chat_model: Path
) -> None:
    handles: list[RequestHandle] = []
    seen: list[tuple[int, RequestStatus]] = []

    def hook(site: str, request_id: str | None) -> None:
        # Engine thread, each step: how many run, and where the 9th request is.
        if site == "step" and len(handles) == 9:
            seen.append((sum(h.status is RequestStatus.DECODING for h in handles[:8]),
                         handles[8].status))  # fmt: skip

    probe = make_engine().load_model(tiny_chat_model)
    one = probe.kv.bytes_for(100 + 28)
    engine = make_engine(max_batch=16, kv_budget_bytes=8 * one, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    prompts = random_prompts(9, info.vocab_size, (100, 101), seed=3)
    for prompt in prompts:
        handles.append(engine.submit(request(info, prompt, max_tokens=28, ignore_eos=True)))
    answers = [h.collect() for h in handles]
    assert all(len(tokens) == 28 for tokens, _ in answers)
    assert (8, RequestStatus.WAITING) in seen  # the other eight decoded while it waited
    assert answers[8][1].timings.queued_s > 0
    stats = engine.stats()
    assert (stats.kv_bytes_in_use, stats.kv_budget_bytes) == (0, 8 * one)


def test_a_request_larger_than_the_budget_is_refused_with_the_numbers(
    make_engine: EngineFactory, tiny_chat_model: Path
) -> None:
    engine = make_engine(kv_budget_bytes=100_000)
    info = engine.load_model(tiny_chat_model)
    prompt = random_prompts(1, info.vocab_size, (100, 101), seed=4)[0]
    with pytest.raises(InvalidRequest) as refused:
        engine.submit(request(info, prompt, max_tokens=200))
    assert str(refused.value).startswith(
        "this request can hold 153600 bytes of KV (100 prompt + 200 new tokens at 512 bytes per "
        "token), more than the KV budget of 100000 bytes"
    )
    assert refused.value.param == "max_tokens"
    assert len(engine.submit(request(info, prompt, max_tokens=50)).collect()[0]) > 0


def test_the_default_budget_comes_from_memory_left_at_load(
    make_engine: EngineFactory, tiny_chat_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLXD_LOAD_MEMORY_FRACTION", raising=False)
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    assert info.kv_headroom is not None and info.kv_headroom > 0
    assert engine.kv_budget_bytes(info) == int(0.9 * info.kv_headroom)
