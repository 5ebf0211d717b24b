"""mlxd's PromptTrie answers as mlx-lm's does (the prefix cache's look-ups), checked on random
adds, pops and prefix pops against mlx-lm's own trie; and its search walks one path down."""

from __future__ import annotations

import random

import pytest
from mlx_lm.models.cache import PromptTrie as MlxLmTrie

from mlxd.backend.prefix.prompt_trie import PromptTrie


def _same_answers(ours: PromptTrie, theirs: MlxLmTrie, stored: set[tuple[int, ...]], q: list[int]):
    a, b = ours.search("m", q), theirs.search("m", q)
    assert (a.exact, a.shorter, a.common_prefix) == (b.exact, b.shorter, b.common_prefix), q
    if b.longer is None:
        assert a.longer is None
    else:  # the shortest stored extension: ties may be broken differently
        assert a.longer is not None and len(a.longer) == len(b.longer)
        assert tuple(a.longer) in stored and a.longer[: a.common_prefix] == q[: a.common_prefix]
        assert ours.get("m", a.longer) == theirs.get("m", a.longer)


@pytest.mark.parametrize("seed", range(6))
def test_search_agrees_with_mlx_lm_under_random_changes(seed: int) -> None:
    rng = random.Random(seed)
    ours, theirs = PromptTrie(), MlxLmTrie()  # type: ignore[no-untyped-call]
    stored: set[tuple[int, ...]] = set()

    def sequence() -> list[int]:  # a small alphabet: many shared prefixes
        if stored and rng.random() < 0.5:
            base = list(rng.choice(sorted(stored)))
            return base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(3)]
        return [rng.randrange(3) for _ in range(rng.randrange(1, 9))]

    for step in range(400):
        op = rng.random()
        if op < 0.5 or not stored:
            tokens = sequence()
            assert ours.add("m", tokens, step) == theirs.add("m", tokens, step)
            stored.add(tuple(tokens))
        elif op < 0.8:
            tokens = list(rng.choice(sorted(stored)))
            assert ours.pop("m", tokens) == theirs.pop("m", tokens)
            stored.discard(tuple(tokens))
        else:
            tokens = list(rng.choice(sorted(stored)))
            popped = ours.pop_prefixes("m", tokens)
            assert popped == theirs.pop_prefixes("m", tokens)
            stored -= {tuple(tokens[:i]) for i, _ in popped}
        for _ in range(3):
            _same_answers(ours, theirs, stored, sequence())
        for tokens in stored:
            assert ours.get("m", list(tokens)) == theirs.get("m", list(tokens))


def test_an_unknown_model_or_an_empty_trie_finds_nothing() -> None:
    trie = PromptTrie()
    assert trie.search("m", [1, 2]).common_prefix == 0
    trie.add("m", [1, 2, 3], "v")
    assert trie.search("other", [1, 2]).longer is None
    assert trie.pop("m", [1, 2, 3]) == "v"
    found = trie.search("m", [1, 2])
    assert (found.exact, found.shorter, found.longer, found.common_prefix) == (None, None, None, 0)
    with pytest.raises(KeyError):
        trie.get("m", [1, 2, 3])


def test_search_follows_one_path_whatever_is_stored_below() -> None:
    # Many long entries past a shared head (chat prompts sharing a template's first tokens):
    # the shortest one extending the head is found without walking the others.
    trie = PromptTrie()
    rng = random.Random(0)
    for i in range(200):
        trie.add("m", [7, 7, 7] + [rng.randrange(1000) for _ in range(300)], i)
    trie.add("m", [7, 7, 7, 5, 5], "short")
    found = trie.search("m", [7, 7, 7, 9])
    assert found.common_prefix == 3 and found.longer == [7, 7, 7, 5, 5]
