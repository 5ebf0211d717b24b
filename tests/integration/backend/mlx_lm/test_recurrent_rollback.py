"""mlx_lm.recurrent_rollback on real hybrid checkpoints (qwen3_next gated delta-nets, lfm2
short convolutions): after a verify forward over a batch and the rollback to each row's
kept length, every layer's cache and the next forward equal those of each row fed only
its kept tokens alone."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, BatchKVCache, KVCache, make_prompt_cache
from mlx_lm.utils import load_model

from mlxd.backend.mlx_lm.recurrent_rollback import RecurrentRollback, recurrent_mixers
from mlxd.backend.mlx_lm.verify_step import rewind_rows, target_rewindable

WINDOW = [7, 5, 9, 11]  # a verify forward: the next token and three drafts


def _model(path: Path):
    model, _ = load_model(path)
    return model


def _single(model, tokens: list[int]):
    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def _batch(model, prompts: list[list[int]]):
    rows = [_single(model, p) for p in prompts]
    merged = []
    for layers in zip(*rows, strict=True):
        kind = ArraysCache if type(layers[0]) is ArraysCache else BatchKVCache
        merged.append(kind.merge(list(layers)))
    for layer in merged:
        if type(layer) is ArraysCache:
            layer.left_padding = None  # decoding: every row's prompt is consumed
    return merged


@pytest.mark.parametrize("kind", ["gated", "hybrid"])
def test_rollback_equals_feeding_the_kept_tokens(kind: str, request: pytest.FixtureRequest):
    model = _model(request.getfixturevalue(f"tiny_{kind}_model"))
    assert target_rewindable(model) and recurrent_mixers(model)
    rollback = RecurrentRollback.for_model(model)
    assert rollback is not None
    prompts = [[3, 4, 5, 6, 7, 8], [20, 21, 22], [40, 41, 42, 43, 44]]
    kept = [1, 3, 4]
    cache = _batch(model, prompts)
    saved = rollback.save(cache)
    model(mx.array([WINDOW] * len(prompts)), cache=cache)
    rewind_rows(cache, [len(WINDOW) - n for n in kept])
    rollback.restore(cache, saved, kept)
    after = model(mx.array([[13]] * len(prompts)), cache=cache)[:, -1, :]
    for i, (prompt, n) in enumerate(zip(prompts, kept, strict=True)):
        alone = _single(model, prompt + WINDOW[:n])
        expected = model(mx.array([[13]]), cache=alone)[0, -1, :]
        assert mx.allclose(after[i], expected, atol=1e-4).item(), (kind, i)


def test_accepting_the_whole_window_keeps_the_states(tiny_gated_model: Path) -> None:
    model = _model(tiny_gated_model)
    rollback = RecurrentRollback.for_model(model)
    assert rollback is not None
    cache = _single(model, [3, 4, 5])
    saved = rollback.save(cache)
    model(mx.array([WINDOW]), cache=cache)
    states = [list(c.cache) for c in cache if type(c) is ArraysCache]
    rollback.restore(cache, saved, [len(WINDOW)])
    assert [list(c.cache) for c in cache if type(c) is ArraysCache] == states  # same arrays


def test_plain_and_rotating_models(tiny_chat_model: Path, tiny_sliding_model: Path) -> None:
    """A plain model has nothing to roll back; a sliding-window one cannot be rewound."""
    plain, sliding = _model(tiny_chat_model), _model(tiny_sliding_model)
    assert RecurrentRollback.for_model(plain) is None and target_rewindable(plain)
    assert all(type(c) is KVCache for c in make_prompt_cache(plain))
    assert not target_rewindable(sliding)
