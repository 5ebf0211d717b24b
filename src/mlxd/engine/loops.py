"""Loop detection: a request whose answer has fallen into a degenerate repetition ends (finish
reason LOOP, which every API reports as its "length") instead of running to its budget.

A loop is a unit of 1 to `loop_max_period` tokens repeated `loop_repeats` times in a row at the
end of the answer, covering at least `loop_min_tokens` tokens (config.ENGINE_DEFAULTS): a
1-token unit must repeat that many times, a long one as many times as asked.
"""

from __future__ import annotations

from collections import deque

from mlxd.config import ENGINE_DEFAULTS


class LoopWatch:
    """One request's detector, fed its generated tokens one by one. For each period p it
    keeps how many tokens in a row have equalled the token p before them: the answer's tail
    is periodic with period p over p plus that many tokens (O(max period) per token)."""

    __slots__ = ("_repeats", "_min_tokens", "_tail", "_runs")

    def __init__(self, repeats: int) -> None:
        periods = ENGINE_DEFAULTS["loop_max_period"]
        self._repeats = repeats
        self._min_tokens = ENGINE_DEFAULTS["loop_min_tokens"]
        self._tail: deque[int] = deque(maxlen=periods)  # the last tokens, newest first
        self._runs = [0] * (periods + 1)  # index p: the run of period p

    def push(self, token: int) -> bool:
        """Add the next generated token; True when the answer now ends in a loop."""
        tail, runs, looped = self._tail, self._runs, False
        for p, earlier in enumerate(tail, start=1):
            if earlier == token:
                runs[p] += 1
                length = p + runs[p]
                looped = looped or length >= max(p * self._repeats, self._min_tokens)
            else:
                runs[p] = 0
        tail.appendleft(token)
        return looped
