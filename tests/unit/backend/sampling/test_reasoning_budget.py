"""ReasoningBudget on logits: free until N reasoning tokens, then only the end marker's
tokens one by one, then free again for good."""

from __future__ import annotations

import math

import mlx.core as mx

from mlxd.backend.sampling.reasoning_budget import ReasoningBudget
from mlxd.types import ReasoningMarkers

V = 12
START, END = (1,), (2, 3)  # a one-token start marker, a two-token end marker
PROMPT = [5, 6]


def allowed(budget: ReasoningBudget, context: list[int]) -> list[int]:
    """The tokens the budget leaves finite after `context` (prompt + generated)."""
    out = budget(mx.array(context), mx.zeros((1, V)))[0].tolist()
    return [t for t, x in enumerate(out) if math.isfinite(x)]


def run(budget: ReasoningBudget, generated: list[int]) -> list[list[int]]:
    """What the budget allows at each step while the row writes `generated`."""
    return [allowed(budget, PROMPT + generated[:k]) for k in range(len(generated) + 1)]


ALL = list(range(V))


def test_the_end_marker_is_forced_after_n_reasoning_tokens() -> None:
    steps = run(ReasoningBudget(3, ReasoningMarkers(START, END)), [1, 7, 8, 9, 2, 3, 4, 1])
    # <think>, 3 reasoning tokens, then 2 and 3 forced, then free (a later 1 is answer text).
    assert steps == [ALL, ALL, ALL, ALL, [2], [3], ALL, ALL, ALL]


def test_a_block_the_prompt_opened_is_counted_from_the_first_token() -> None:
    steps = run(ReasoningBudget(2, ReasoningMarkers(START, END, open=True)), [7, 8, 2, 3])
    assert steps == [ALL, ALL, [2], [3], ALL]
    assert run(ReasoningBudget(0, ReasoningMarkers(START, END, open=True)), [2, 3]) == [
        [2],
        [3],
        ALL,
    ]


def test_a_block_that_ends_in_time_is_never_forced() -> None:
    steps = run(ReasoningBudget(5, ReasoningMarkers(START, END)), [1, 7, 2, 3, 1, 7, 7, 7, 7, 7])
    assert all(s == ALL for s in steps)


def test_no_reasoning_block_no_mask() -> None:
    steps = run(ReasoningBudget(0, ReasoningMarkers(START, END)), [7, 8, 9])
    assert all(s == ALL for s in steps)
