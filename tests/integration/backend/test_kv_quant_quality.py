"""A floor on quantized KV's per-step (teacher-forced) agreement with full precision (issue
30): one forward pass over each prompt through the engine's cache classes (`quantize_kv`),
the top-1 token at every position compared with full precision's. Unlike free-running
agreement, one early flip does not end the comparison, so the floor is sharp."""

from __future__ import annotations

import random
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.kv.model_cache import quantize_kv
from mlxd.backend.loader import load_checkpoint
from tests.checkpoints import make_checkpoint

FLOOR = 0.8  # share of positions whose top-1 token is full precision's


def _top1(model: object, prompts: list[list[int]], bits: int, start: int = 0) -> mx.array:
    quantize_kv(model, bits, 64, start)
    rows = [model(mx.array([p]), cache=make_prompt_cache(model))[0] for p in prompts]  # type: ignore[operator]
    return mx.argmax(mx.stack(rows), axis=-1)


def _agreement(model: object, prompts: list[list[int]], bits: int, start: int = 0) -> float:
    full = _top1(model, prompts, 0)
    return float(mx.mean(_top1(model, prompts, bits, start) == full).item())


def test_per_step_agreement_floor(checkpoints_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Measured on this random-weight checkpoint (8 prompts x 64 positions): 8-bit 0.89, 4-bit
    # 0.40, 8-bit with the quantizer's biases dropped 0.01.
    loaded = load_checkpoint(make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium"))
    model = loaded.model
    rng = random.Random(0)
    vocab = int(model.args.vocab_size)
    prompts = [[rng.randrange(10, vocab) for _ in range(64)] for _ in range(8)]
    assert _agreement(model, prompts, 8) >= FLOOR
    assert _agreement(model, prompts, 8, start=16) >= FLOOR  # the exact tail's cache class
    assert _agreement(model, prompts, 4) < FLOOR  # a coarser quantizer fails the floor

    quantize = mx.quantize

    def broken(x: mx.array, group_size: int = 64, bits: int = 8, **kw: object) -> tuple:
        words, scales, biases = quantize(x, group_size=group_size, bits=bits, **kw)
        return words, scales, mx.zeros_like(biases)

    monkeypatch.setattr(mx, "quantize", broken)
    assert _agreement(model, prompts, 8) < FLOOR
