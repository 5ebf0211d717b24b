"""The batched DFlash drafter forward (speculation/dflash_batch.py) gives each row the logits
mlx-vlm's own one-row forward gives it, with rows of different cached and new context
lengths (the padding masked out), and appends the same context to each row's cache."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from mlx_lm.utils import load_model

from mlxd.backend.speculation.dflash_batch import batchable, draft_logits
from mlxd.backend.speculation.dflash_load import _load
from tests.dflash_checkpoints import make_dflash_drafter, make_qwen3_target


def test_batched_drafts_equal_one_row_drafts(tmp_path: Path) -> None:
    target_path = make_qwen3_target(tmp_path / "qwen3")
    drafter = _load(make_dflash_drafter(tmp_path / "qwen3-dflash", target_path))
    target, _ = load_model(target_path)
    drafter.bind(target)
    assert batchable(drafter)
    width = 2 * 64  # two tapped layers of hidden 64
    mx.random.seed(3)
    alone, batched = (
        [drafter.make_cache() for _ in range(3)],
        [drafter.make_cache() for _ in range(3)],
    )
    for before, one, many in zip([3, 0, 7], alone, batched, strict=True):
        if before:
            context = mx.random.normal((1, before, width))
            drafter(mx.array([[5]]), context, one)
            drafter(mx.array([[5]]), context, many)
    contexts = [mx.random.normal((1, n, width)) for n in (2, 5, 1)]
    blocks = mx.array([[11, 0, 0, 0], [12, 0, 0, 0], [13, 0, 0, 0]])
    expected = mx.concatenate([drafter(blocks[i : i + 1], contexts[i], alone[i]) for i in range(3)])
    got = draft_logits(drafter, blocks, contexts, batched)
    assert mx.allclose(got, expected, atol=1e-4).item()
    assert [c[0].offset for c in batched] == [c[0].offset for c in alone] == [5, 5, 8]
    k, _ = batched[2][0].state
    assert mx.allclose(k, alone[2][0].state[0], atol=1e-4).item()


def test_a_drafter_state_cuts_to_a_shorter_prefix() -> None:
    """A snapshot's drafter state (prefix cache) cut back with it: inside its pending
    states, at the end of its KV, or inside its KV; never past what it covers."""
    from mlx_vlm.models.cache import KVCache

    from mlxd.backend.speculation.dflash_drafter import DflashState

    cache = KVCache()
    cache.update_and_fetch(mx.ones((1, 2, 5, 4)), mx.ones((1, 2, 5, 4)))
    state = DflashState([cache], mx.zeros((1, 3, 8)))
    assert state.tokens == 8 and state.cut(9) is None and state.cut(0) is None
    pending = state.cut(6)
    assert pending is not None and pending.kv is not None and pending.pending is not None
    assert (pending.kv[0].offset, pending.pending.shape[1], pending.tokens) == (5, 1, 6)
    inside = state.cut(3)
    assert inside is not None and inside.kv is not None and inside.pending is None
    assert inside.kv[0].state[0].shape[2] == inside.tokens == 3
    assert cache.offset == 5  # the snapshot's own is untouched
