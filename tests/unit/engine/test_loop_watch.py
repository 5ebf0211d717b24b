"""Loop detection (engine.loops.LoopWatch): a unit repeated `repeats` times over at least
loop_min_tokens ends the answer; anything else never does."""

from __future__ import annotations

import random

from mlxd.config import ENGINE_DEFAULTS
from mlxd.engine.loops import LoopWatch

MIN = ENGINE_DEFAULTS["loop_min_tokens"]


def first_loop(tokens: list[int], repeats: int) -> int | None:
    """The index of the token at which the watch reports a loop (None: never)."""
    watch = LoopWatch(repeats)
    for i, token in enumerate(tokens):
        if watch.push(token):
            return i
    return None


def test_a_long_unit_ends_after_its_repeats() -> None:
    unit = list(range(100, 140))  # 40 tokens
    assert first_loop(unit * 5, repeats=3) == 3 * 40 - 1
    assert first_loop(unit * 5, repeats=5) == 5 * 40 - 1
    assert first_loop(unit * 2, repeats=3) is None


def test_a_short_unit_must_cover_the_minimum() -> None:
    assert first_loop([7] * 200, repeats=3) == MIN - 1  # 1 token: MIN of them
    assert first_loop([1, 2] * 100, repeats=3) == MIN - 1
    assert first_loop([5] * (MIN - 1), repeats=3) is None


def test_a_loop_after_a_varied_start_is_found_and_varied_text_never_is() -> None:
    rng = random.Random(3)
    varied = [rng.randrange(1000) for _ in range(2000)]
    assert first_loop(varied, repeats=2) is None
    unit = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    assert first_loop(varied[:50] + unit * 10, repeats=4) == 50 + MIN - 1


def test_units_longer_than_the_longest_period_are_not_loops() -> None:
    period = ENGINE_DEFAULTS["loop_max_period"] + 1
    assert first_loop(list(range(period)) * 4, repeats=2) is None
