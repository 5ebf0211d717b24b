"""How many waiting prompts the next prefill step takes, chosen from measured step costs.

A step costs about `d + e * P`: d is what the running batch's decode costs anyway (mostly fixed
overhead on small models or with a fast BLAS), e the cost of one prompt token, P the padded prompt
tokens prefilled. A group (one prompt or several) takes S = 3 steps from its prefill to its
first token (BatchRunner): the step that prefills it, the one that runs its last prompt token,
and the one that emits the first token, which prefills nothing. Prefilling k prompts of length L
together gives each its first token after `S*d + e*k*L`; one at a time, the i-th waits
`i * (S*d + e*L)`. Together wins on mean time to first token exactly when `e * L < S * d` (for
every k), and always wins on throughput and on the longest wait. So prompts join a group while
the padded tokens each adds cost less than S steps; d and e are measured online (moving averages
of real steps), and until both are known the static token budget decides.
"""

from __future__ import annotations

from collections.abc import Iterable

# Weight of the newest step in the moving averages: steps are noisy (GC, other threads).
_ALPHA = 0.2
# A step counts as at most this many times the estimate: one step stalled by something else
# (another process on a busy machine: per-token prefill costs 60x the usual were seen) moves
# the estimate by at most 40%, while a real change of regime still wins in a few steps.
_OUTLIER = 3.0
# Steps from a group's prefill to its first token; each one also decodes the running batch.
STEPS_TO_FIRST_TOKEN = 3


class PrefillPlanner:
    """Per-runner estimates of d and e, and the grouping rule; pure Python, no mlx."""

    def __init__(self, max_prompts: int, static_budget: int, chunk: int) -> None:
        self.max_prompts = max(1, max_prompts)
        self.static_budget = static_budget  # padded-token budget used until costs are known
        self.chunk = max(1, chunk)  # prompts longer than a chunk are never grouped
        self.decode_s: float | None = None  # d: a step that prefills nothing
        self.token_s: float | None = None  # e: one padded prompt token of prefill

    @property
    def measured(self) -> bool:
        return self.decode_s is not None and self.token_s is not None

    def observe_decode(self, seconds: float) -> None:
        """A step that only decoded (no prompt waiting or being prefilled)."""
        self.decode_s = _ewma(self.decode_s, seconds)

    def observe_prefill(self, seconds: float, padded_tokens: int) -> None:
        """A step that started prefilling a group of `padded_tokens` (longest x count), all
        within one chunk; its cost beyond a decode step is the prompts' share."""
        if self.decode_s is None or padded_tokens <= 0:
            return
        per_token = max(seconds - self.decode_s, 0.0) / padded_tokens
        self.token_s = _ewma(self.token_s, per_token)

    def plan(self, waiting: Iterable[int]) -> int:
        """How many of the waiting prompts (their lengths, in arrival order) to prefill now:
        at least one, at most `max_prompts`."""
        count, longest = 0, 0
        for length in waiting:
            if count >= self.max_prompts:
                break
            candidate = max(longest, length)
            if count and not self._worth_adding(count, longest, candidate):
                break
            count, longest = count + 1, candidate
        return max(count, 1)

    def _worth_adding(self, count: int, longest: int, candidate: int) -> bool:
        if candidate > self.chunk:
            return False  # a multi-chunk group delays every member by its longest prompt
        added = candidate * (count + 1) - longest * count
        if not self.measured:
            return candidate * (count + 1) <= self.static_budget
        assert self.decode_s is not None and self.token_s is not None
        return self.token_s * added < STEPS_TO_FIRST_TOKEN * self.decode_s


def _ewma(old: float | None, new: float) -> float:
    if old is None:
        return new
    return old + _ALPHA * (min(new, _OUTLIER * old) - old)
