"""The prefix cache's store on real mlx-lm cache objects (no model): which snapshot a prompt
reuses, trimming, the byte bound, and pruning of a conversation's older turns."""

from __future__ import annotations

import gc

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache

from mlxd.backend.mlx_lm.compat import PromptCache
from mlxd.backend.prefix.cache import (
    ENTRY_BYTES,
    KEY_TOKEN_BYTES,
    MIN_REUSE_TOKENS,
    PrefixCache,
    SnapshotKind,
    Turn,
)
from mlxd.backend.prefix.prompt_trie import NODE_BYTES

M = "model"
KIND = SnapshotKind.PROMPT


def attention(tokens: int) -> PromptCache:
    """A trimmable cache holding `tokens` tokens (one attention layer)."""
    cache = KVCache()
    cache.update_and_fetch(mx.zeros((1, 2, tokens, 8)), mx.zeros((1, 2, tokens, 8)))
    return [cache]


def recurrent(tokens: int) -> PromptCache:
    """A cache that cannot be cut back (a recurrent state), its value = its token count."""
    cache = ArraysCache(1)
    cache[0] = mx.full((1, 4, 16), float(tokens))
    return [cache]


def seq(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def held(cache: PromptCache, tokens: int) -> int:
    """What the cache counts for one entry of `tokens` tokens sharing no trie node."""
    return sum(c.nbytes for c in cache) + ENTRY_BYTES + tokens * (KEY_TOKEN_BYTES + NODE_BYTES)


def test_reuses_the_longest_prefix_and_never_the_last_token() -> None:
    pc = PrefixCache(1 << 30)
    prompt = seq(60)
    pc.store(M, prompt[:20], recurrent(20), KIND, None)
    pc.store(M, prompt[:59], recurrent(59), KIND, None)
    reuse = pc.fetch(M, prompt)
    assert reuse.tokens == 59 and reuse.cache is not None
    assert reuse.cache[0][0].max().item() == 59  # type: ignore[index]
    assert pc.fetch(M, prompt[:59]).tokens == 20  # the entry at 59 would leave nothing to run
    assert pc.fetch(M, prompt[:40] + seq(5, 900)).tokens == 20


def test_a_recurrent_state_is_never_cut_back_but_attention_kv_is() -> None:
    pc = PrefixCache(1 << 30)
    pc.store(M, seq(50), recurrent(50), KIND, None)
    assert pc.fetch(M, seq(30) + seq(10, 900)).tokens == 0
    pc.store(M, seq(50, 300), attention(50), KIND, None)
    reuse = pc.fetch(M, seq(30, 300) + seq(10, 900))
    assert reuse.tokens == 30 and reuse.cache is not None and reuse.cache[0].offset == 30
    assert len(pc) == 2  # the stored entry itself is untouched: fetch copies


def test_a_handful_of_shared_tokens_is_no_reuse() -> None:
    pc = PrefixCache(1 << 30)
    pc.store(M, seq(40), attention(40), KIND, None)
    short = MIN_REUSE_TOKENS - 1
    assert pc.fetch(M, seq(short) + seq(30, 900)).tokens == 0
    assert pc.reusable(M, seq(short) + seq(30, 900)) == 0
    assert pc.fetch(M, seq(MIN_REUSE_TOKENS) + seq(30, 900)).tokens == MIN_REUSE_TOKENS


def test_a_trimmable_entry_replaces_its_own_prefixes() -> None:
    pc = PrefixCache(1 << 30)
    pc.store(M, seq(20), attention(20), SnapshotKind.SYSTEM, None)
    pc.store(M, seq(40), attention(40), KIND, None)
    assert len(pc) == 1 and pc.stats().pruned == 1
    assert pc.fetch(M, seq(20) + seq(30, 900)).tokens == 20  # cut back from the 40


def test_a_next_turn_prunes_the_turn_it_continues_but_a_branch_does_not() -> None:
    pc = PrefixCache(1 << 30)
    system, history = seq(20), seq(60)
    first = history + seq(10, 500)  # the last message, then the generation prompt
    turn1 = pc.fetch(M, first, next_turn=len(first)).turn
    pc.store(M, system, recurrent(20), SnapshotKind.SYSTEM, turn1)
    pc.store(M, history, recurrent(60), SnapshotKind.HISTORY, turn1)
    pc.store(M, first[:-1], recurrent(69), KIND, turn1)
    assert len(pc) == 3

    branch = history + seq(12, 700)  # same history, another last message
    reuse = pc.fetch(M, branch, next_turn=len(branch))
    assert reuse.tokens == 60
    pc.store(M, branch[:-1], recurrent(71), KIND, reuse.turn)
    assert len(pc) == 4 and pc.stats().pruned == 0

    second = first + seq(30, 800)  # the answer and a new message
    reuse = pc.fetch(M, second, next_turn=len(second))
    assert reuse.tokens == len(first) - 1
    assert pc.stats().pruned == 0  # nothing goes before the new turn stored a snapshot
    pc.store(M, second[:-1], recurrent(99), KIND, reuse.turn)
    assert pc.stats().pruned == 2  # turn 1's history and prompt snapshots
    assert pc.fetch(M, system + seq(30, 900)).tokens == 20  # the system prompt stays
    assert pc.fetch(M, branch).tokens == len(branch) - 1  # and so does the branch


def test_the_same_prompt_again_joins_its_turn() -> None:
    pc = PrefixCache(1 << 30)
    prompt = seq(40)
    turn = pc.fetch(M, prompt).turn
    pc.store(M, prompt[:-1], recurrent(39), KIND, turn)
    again = pc.fetch(M, prompt)
    assert again.tokens == 39 and again.turn is turn and again.turn.continues is None


def test_bounded_in_bytes_least_recently_used_first() -> None:
    one = held(recurrent(1), 30)
    pc = PrefixCache(3 * one)
    for i in range(3):
        pc.store(M, seq(30, 1000 * i), recurrent(30), KIND, None)
    assert pc.fetch(M, seq(30, 0) + [1]).tokens == 30  # the oldest is now the newest
    pc.store(M, seq(30, 3000), recurrent(30), KIND, None)
    stats = pc.stats()
    assert (stats.entries, stats.bytes, stats.evictions) == (3, 3 * one, 1)
    assert stats.kv_bytes == 3 * sum(c.nbytes for c in recurrent(1))
    assert pc.fetch(M, seq(30, 1000) + [1]).tokens == 0  # evicted
    assert pc.fetch(M, seq(30, 0) + [1]).tokens == 30
    tiny = PrefixCache(one - 1)
    tiny.store(M, seq(30), recurrent(30), KIND, None)
    assert len(tiny) == 0  # larger than the whole budget: not kept


def test_drop_forgets_one_model() -> None:
    pc = PrefixCache(1 << 30)
    pc.store("a", seq(30), attention(30), KIND, None)
    pc.store("b", seq(30), attention(30), KIND, None)
    assert pc.drop("a") == 1 and len(pc) == 1
    assert pc.fetch("a", seq(31)).tokens == 0 and pc.fetch("b", seq(31)).tokens == 30
    assert pc.stats().kv_bytes == sum(c.nbytes for c in attention(30))
    assert pc.stats().bytes == held(attention(30), 30)


def test_a_snapshot_from_a_batch_keeps_only_its_own_rows() -> None:
    """A sequence's cache extracted from a batch is a view of the whole batch's buffer; the
    stored snapshot must not keep that buffer alive."""
    gc.collect()
    before = mx.get_active_memory()
    batch = mx.random.normal((64, 256, 256))
    mx.eval(batch)
    view = ArraysCache(1)
    view[0] = batch[3:4]
    del batch
    pc = PrefixCache(1 << 30)
    pc.store(M, seq(30), [view], KIND, None)
    del view
    mx.synchronize()
    gc.collect()
    kept = mx.get_active_memory() - before
    assert pc.stats().kv_bytes == 256 * 256 * 4
    assert kept <= 2 * 256 * 256 * 4, kept


@pytest.mark.parametrize("disabled", [0])
def test_a_disabled_cache_keeps_nothing(disabled: int) -> None:
    pc = PrefixCache(disabled)
    pc.store(M, seq(30), attention(30), KIND, Turn(seq(30), 30))
    assert len(pc) == 0 and pc.fetch(M, seq(31)).tokens == 0
