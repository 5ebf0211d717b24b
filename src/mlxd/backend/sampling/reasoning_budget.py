"""ReasoningBudget: one sequence's logits processor that ends its reasoning after N tokens.

While the row reasons (the prompt opened the block, or the row wrote the start marker) it
counts the tokens it writes; at `max_reasoning_tokens` it forces the end marker, one token per
step, and the answer follows freely. A grammar mask after it (backend.structured) sees the
forced marker as any other token and constrains the answer that follows. Like GrammarMask, the
first call ends with the prompt's last token, each later one with the token sampled before.
"""

from __future__ import annotations

from collections import deque
from typing import cast

import mlx.core as mx

from mlxd.types import ReasoningMarkers


class ReasoningBudget:
    """Forces `markers.end` once `limit` reasoning tokens were written (0: at once). One
    block only: a start marker after the block ends is the answer's text."""

    __slots__ = ("_limit", "_start", "_end", "_inside", "_over", "_count", "_forcing", "_tail")

    def __init__(self, limit: int, markers: ReasoningMarkers) -> None:
        self._limit = limit
        self._start = markers.start
        self._end = markers.end
        self._inside = markers.open
        self._over = False
        self._count = 0
        self._forcing: int | None = None  # the index in `end` of the next forced token
        self._tail: deque[int] | None = None  # None until the prompt's last token was fed

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._over:
            return logits
        if self._tail is None:
            self._tail = deque(maxlen=max(len(self._start), len(self._end), 1))
        else:
            self._advance(self._tail, cast(int, tokens[-1].item()))
        if self._inside and self._forcing is None and self._count >= self._limit:
            self._forcing = 0
        if self._forcing is None:
            return logits
        keep = mx.arange(logits.shape[-1]) == self._end[self._forcing]
        return mx.where(keep, logits, mx.array(-mx.inf, dtype=logits.dtype))

    def _advance(self, tail: deque[int], token: int) -> None:
        tail.append(token)
        if self._forcing is not None:
            self._forcing += 1
            if self._forcing == len(self._end):
                self._forcing, self._inside, self._over = None, False, True
        elif self._inside:
            if _ends_with(tail, self._end):
                self._inside, self._over = False, True
            else:
                self._count += 1
        elif _ends_with(tail, self._start):
            self._inside = True


def _ends_with(tail: deque[int], marker: tuple[int, ...]) -> bool:
    n = len(marker)
    return 0 < n <= len(tail) and tuple(tail)[-n:] == marker
