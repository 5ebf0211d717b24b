"""How many waiting prompts the next prefill step takes, chosen from measured step costs.

A group of prompts (one or several, prefilled side by side) reaches its first tokens after
`e * P + G`: e is the cost of one prompt token, P the group's padded prompt tokens (longest x
count), G what the group's steps cost beyond its prompt tokens, from the step that starts its
prefill to the one that returns its first tokens (BatchRunner: STEPS_TO_FIRST_TOKEN = 3 steps,
each also decoding the running batch; the middle one also runs the group's last prompt tokens
on their own). Two rules; the larger group wins:

- the head: prompts join while the group's padded tokens cost less than G. Its first member
  then waits at most about twice what it would alone (under 2G against at least G), and every
  one behind it gains a whole G. (Joining while each prompt's own tokens cost less than G
  minimises the mean wait of the queue as it stands, since together every one of k prompts
  waits `k*e*L + G` and one at a time the i-th `i * (e*L + G)`; but in a closed loop a group's
  members finish together and come back together, so a group formed once costs every round.)
- the tail: groups go one after another, so the last of the queue waits for every group's
  prompt tokens plus one G per group: one at a time, the last of a wave of k waits
  `k * (e*L + G)`, all together `k*e*L + G`, about 1 + G/(e*L) times less for a long wave.
  While G is under COMPUTE_BOUND of the queue's mean prompt cost, the regime is
  compute-bound and the queue goes one at a time: grouping would gain its last little and
  cost its first prompts a whole prompt each, and in a closed loop a group's members finish
  together and come back together, while one at a time spreads them apart. Otherwise
  (overhead-bound: small models, a fast BLAS) the first group is the size whose consecutive
  groups minimise the queue's mean wait plus its longest wait (its p99 in a burst): both
  fall as groups grow while G dominates, and the mean rises again once the first members
  wait for too many others' tokens. The regime does not depend on the queue's length, so
  what is left of a burst goes as its plan said (a short queue one at a time stays within
  any bound on its longest wait: the last 3 of a burst of 8 went one by one).

When G is small next to a prompt's cost (compute-bound models), both rules give one at a time;
when it is not (small models, a fast BLAS), a burst goes in one or a few groups; prompts much
shorter than G go together. The running rows lose nothing: they decode in every one of those
steps. d (a decode-only step), e and G are measured online (moving averages of real steps; G
counts as 3 decode steps until a group was timed), and until d and e are known the static
token budget decides. e weighs steps by their tokens: a prompt served from the prefix cache
prefills one token in a step that is mostly fixed cost, which must not pass for that token's
cost (it once made e 200 times too high, so G came out 0 and stayed there).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable

# Weight of the newest step in the moving averages: steps are noisy (GC, other threads).
_ALPHA = 0.2
# A step counts as at most this many times the estimate: one step stalled by something else
# (another process on a busy machine: per-token prefill costs 60x the usual were seen) moves
# the estimate by at most 40%, while a real change of regime still wins in a few steps.
_OUTLIER = 3.0
# Steps from a group's prefill to its first token; each one also decodes the running batch.
STEPS_TO_FIRST_TOKEN = 3
# G over the queue's mean prompt cost under which the regime is compute-bound (see the tail
# rule). Measured: 0.15-0.35 on the 93M `xl` checkpoint, 0.55-2 on the tiny one in a server
# (0.35-0.45 in process, without the server's per-step work). In benchmarks/
# prefill_plan_model.py (a step-cost model of closed-loop runs at 8 and 16 clients) one at a
# time gave the compute-bound models their lowest mean TTFT (grouping: +12-48%), and the
# mean-plus-longest objective the overhead-bound ones a p99 16-18% under the rule before
# (the finest groups whose longest wait stays within 40% of the shortest possible).
COMPUTE_BOUND = 0.4
# A step that prefills beside decoding rows costs at most this many decode-only steps: a long
# prompt's chunks shrink to fit, so the rows' inter-token latency stays within ~2x its median
# (issue 30's goal is p99 <= 3x) while the prompt still moves at that pace every step.
BESIDE_DECODE = 2.0
# The first chunk beside decoding rows, before any such step was timed: small, so a long prompt
# arriving at a fresh server (no prefill cost known yet) never stalls the rows for a whole chunk.
PROBE_CHUNK = 32
# Smallest chunk beside decoding rows. The measured cost per token includes the chunk's fixed
# cost, so sizes settle where the whole step fits, if any does: where the chunk's own forward
# costs a decode step or more (small models), sizes would fall to a few tokens and the prompt
# crawl (a 16k prompt beside 4 rows on a 1-layer model: 10 s at a floor of 4, 0.5 s at 32).
MIN_CHUNK = 32
# Decode-only steps whose median is the decode step the chunks beside decoding rows are sized
# against: a mean (d) is pulled up by stalled steps (another process on a busy machine: d came
# out 1.5x the median), and with it the rows' steps during a long prompt.
_RECENT_DECODES = 31


class PrefillPlanner:
    """Per-runner estimates of d, e and G, and the grouping rule; pure Python, no mlx."""

    def __init__(self, max_prompts: int, static_budget: int, chunk: int) -> None:
        self.max_prompts = max(1, max_prompts)
        self.static_budget = static_budget  # padded-token budget used until costs are known
        self.chunk = max(1, chunk)  # prompts longer than a chunk are never grouped
        self.decode_s: float | None = None  # d: a step that prefills nothing
        self.token_s: float | None = None  # e: one padded prompt token of prefill
        self.group_s: float | None = None  # G: a group's steps to its first token, beyond e*P
        # e is the ratio of two moving averages, a prefill step's cost beyond a decode step
        # and its padded tokens: weighted by tokens, so a step of a few tokens (a prompt
        # served from the prefix cache: its step is mostly fixed cost) moves it little.
        self._extra_s = 0.0
        self._tokens = 0.0
        self._seen_tokens = 0
        # The cost per token, beyond a decode step, of the latest chunks run beside decoding
        # rows: it grows along a long prompt (attention spans more positions) and carries the
        # chunk's fixed cost, so the next chunk is sized from it rather than from e.
        self.beside_s: float | None = None
        self._beside = 0  # prompt tokens the next step runs beside decoding rows
        self._decodes: deque[float] = deque(maxlen=_RECENT_DECODES)
        # The next step, as `expect` announced it: its padded prefill tokens (0: it only
        # decodes; None: its cost says nothing clean), the group it starts (padded tokens in
        # all), and whether it returns the first tokens of the group being timed. That group:
        # (perf_counter at the start of its first prefill step, its padded tokens in all).
        self._planned: int | None = None
        self._starts = 0
        self._due = False
        self._timed: tuple[float, int] | None = None

    @property
    def measured(self) -> bool:
        return self.decode_s is not None and self.token_s is not None

    @property
    def group_overhead(self) -> float:
        """G as measured, else STEPS_TO_FIRST_TOKEN decode steps (0.0 before any step)."""
        if self.group_s is not None:
            return self.group_s
        return STEPS_TO_FIRST_TOKEN * (self.decode_s or 0.0)

    def observe_decode(self, seconds: float) -> None:
        """A step that only decoded (no prompt waiting or being prefilled)."""
        self.decode_s = _ewma(self.decode_s, seconds)
        self._decodes.append(seconds)

    @property
    def decode_median(self) -> float | None:
        """The median of the latest decode-only steps (None before any)."""
        return statistics.median(self._decodes) if self._decodes else None

    def observe_prefill(self, seconds: float, padded_tokens: int) -> None:
        """A step that started prefilling a group of `padded_tokens` (longest x count), all
        within one chunk; its cost beyond a decode step is the prompts' share."""
        if self.decode_s is None or padded_tokens <= 0:
            return
        extra = max(seconds - self.decode_s, 0.0)
        self._seen_tokens += padded_tokens
        # Early on, the token-weighted mean of every step so far (a first step of one cached
        # token's fixed cost must not stand for many); a stalled step (over _OUTLIER times
        # what e predicts) counts as that, with the usual weight.
        weight = max(_ALPHA, padded_tokens / self._seen_tokens)
        if self.token_s is not None and extra > _OUTLIER * self.token_s * padded_tokens:
            extra, weight = _OUTLIER * self.token_s * padded_tokens, _ALPHA
        self._extra_s += weight * (extra - self._extra_s)
        self._tokens += weight * (padded_tokens - self._tokens)
        self.token_s = self._extra_s / self._tokens

    def observe_group(self, seconds: float, padded_tokens: int) -> None:
        """A group of `padded_tokens` in all (its whole prompts, within one chunk) took
        `seconds` from the start of the step that began its prefill to the end of the step
        that returned its first tokens; beyond its tokens' cost, that is G."""
        if self.token_s is None or padded_tokens <= 0:
            return
        new = max(seconds - self.token_s * padded_tokens, 0.0)
        # Outliers are judged against at least the group's decode steps: an estimate that
        # reached 0 (noise, or e overestimated for a while) must be able to grow again.
        floor = STEPS_TO_FIRST_TOKEN * (self.decode_s or 0.0)
        self.group_s = _ewma(self.group_s, new, floor)

    def observe_beside(self, seconds: float, tokens: int) -> None:
        """A step that ran a chunk of `tokens` prompt tokens (in all) beside decoding rows."""
        decode = self.decode_median
        if decode is None or tokens <= 0:
            return
        extra = max(seconds - decode, 0.0) / tokens
        # A step measured as cheap as a decode step must not pin the estimate at 0: judge
        # outliers against at least the cost at which a whole chunk takes one decode step.
        self.beside_s = _ewma(self.beside_s, extra, decode / self.chunk)

    def expect(
        self, prefilled: int | None, starts: int = 0, first_tokens: bool = False, beside: int = 0
    ) -> None:
        """What the next step runs: `prefilled` padded prompt tokens (0: it only decodes,
        None: a group mid-prefill or longer than a chunk), a new group of `starts` padded
        tokens in all, whether it computes a just-prefilled sequence's first token, and (with
        None) the `beside` prompt tokens of the chunk it runs beside decoding rows."""
        self._planned = prefilled
        self._starts = starts
        self._due = first_tokens and self._timed is not None
        self._beside = beside if prefilled is None else 0

    def step_done(self, started: float, ended: float, prefilling: bool) -> None:
        """Learn from the step `expect` announced (its perf_counter span) and time the groups,
        from the step that starts one to the step that returns its first tokens
        (`prefilling`: a group is being prefilled after the step)."""
        if self._planned == 0:
            self.observe_decode(ended - started)
        elif self._planned is not None:
            self.observe_prefill(ended - started, self._planned)
        elif self._beside:
            self.observe_beside(ended - started, self._beside)
        if self._due and self._timed is not None:
            self.observe_group(ended - self._timed[0], self._timed[1])
            self._timed = None
        if self._starts and prefilling:  # the planned group started
            self._timed = (started, self._starts)

    def chunk_beside(self, decoding: int, prompts: int) -> int:
        """Prompt tokens per prompt the next prefill step runs, for `prompts` side by side:
        the whole chunk when no row decodes; beside `decoding` rows, what keeps the step
        within BESIDE_DECODE decode steps (their recent median) at the latest chunks' measured
        cost per token (else e), or PROBE_CHUNK while neither is known."""
        if not decoding:
            return self.chunk
        per_token = self.beside_s if self.beside_s is not None else self.token_s
        decode = self.decode_median
        if decode is None or not per_token:
            return min(PROBE_CHUNK, self.chunk)
        fits = (BESIDE_DECODE - 1) * decode / (per_token * max(prompts, 1))
        return max(min(int(fits), self.chunk), min(MIN_CHUNK, self.chunk))

    def plan(self, waiting: Iterable[int]) -> int:
        """How many of the waiting prompts (their lengths, in arrival order) to prefill now:
        at least one, at most `max_prompts`."""
        lengths = list(waiting)
        if not self.measured or not lengths:
            return self._static_plan(lengths)
        assert self.token_s is not None
        e, g, most = self.token_s, self.group_overhead, self._groupable(lengths)
        if g <= COMPUTE_BOUND * e * sum(lengths) / len(lengths):
            tail = 1  # compute-bound: one at a time
        else:  # overhead-bound: the least mean + longest wait (ties: the smaller group)
            costs = []
            for size in range(1, most + 1):
                waits = _waits(lengths, size, self.chunk, e, g)
                costs.append(sum(waits) / len(waits) + waits[-1])
            tail = 1 + costs.index(min(costs))
        return max(tail, self._head_plan(lengths, most))

    def _head_plan(self, lengths: list[int], most: int) -> int:
        """Together while the group's padded tokens cost less than G."""
        assert self.token_s is not None
        count, longest = 1, lengths[0] if lengths else 0
        for length in lengths[1:most]:
            candidate = max(longest, length)
            if self.token_s * candidate * (count + 1) >= self.group_overhead:
                break
            count, longest = count + 1, candidate
        return count

    def _groupable(self, lengths: list[int]) -> int:
        """The largest first group allowed: within max_prompts, and no prompt longer than a
        chunk in a group of several (it would delay every member by its whole prefill)."""
        most = 0
        for length in lengths[: self.max_prompts]:
            if length > self.chunk:
                break
            most += 1
        return max(most, 1)

    def _static_plan(self, lengths: list[int]) -> int:
        """Before costs are measured: together while the padded group fits the budget."""
        longest = 0
        for count, length in enumerate(lengths[: self._groupable(lengths)]):
            longest = max(longest, length)
            if count and longest * (count + 1) > self.static_budget:
                return count
        return self._groupable(lengths)


def _waits(
    lengths: list[int], size: int, chunk: int, token_s: float, group_s: float
) -> list[float]:
    """Seconds until each of the queue has its first token (non-decreasing: the last is the
    longest), the queue prefilled in consecutive groups of at most `size` (a prompt longer
    than a chunk alone)."""
    waits: list[float] = []
    clock = 0.0
    i, n = 0, len(lengths)
    while i < n:
        count, longest = 0, 0
        while i + count < n and count < size:
            length = lengths[i + count]
            if count and length > chunk:
                break
            count, longest = count + 1, max(longest, length)
            if length > chunk:
                break
        clock += token_s * longest * count + group_s
        waits.extend([clock] * count)
        i += count
    return waits


def _ewma(old: float | None, new: float, floor: float = 0.0) -> float:
    if old is None:
        return new
    return old + _ALPHA * (min(new, _OUTLIER * max(old, floor)) - old)
