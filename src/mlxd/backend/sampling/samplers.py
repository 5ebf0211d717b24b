"""Per-request samplers and logits processors, and one batch's draws in one array expression.

mlx-lm's `make_sampler` draws from the global `mx.random` state, so two seeded requests in one
batch would disturb each other. Here a sampled request's k-th draw uses the counter-based
uniform of (its seed, k) and an inverse-CDF draw (backend.draws): no PRNG key, so a seeded
request gives the same tokens alone and in any batch, and `sample_rows` draws every row of a
step at once (greedy rows argmax in the same expression). The filters (top-p, min-p, XTC,
top-k) and the penalty processors are mlx-lm's own, DRY is backend.sampling.dry; filters run
per row, only for rows that use them. XTC's coin is drawn from the seed's stream too.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Sequence
from typing import cast

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    apply_xtc,
    greedy_sampler,
    make_logits_processors,
)

from mlxd.backend.api import FaultHook
from mlxd.backend.sampling import draws
from mlxd.backend.sampling import speculative_sampling as rule
from mlxd.backend.sampling.dry import DryPenalty, breaker_ids
from mlxd.backend.sampling.logits_processing import GuardedProcessor, LogitBias, put_rows
from mlxd.backend.sampling.logits_processing import Processor as Processor
from mlxd.types import SamplingParams, Tokenizer, TokenLogprob

Sampler = Callable[[mx.array], mx.array]
OnError = Callable[[BaseException], None]
Filter = Callable[[mx.array], mx.array]
# One sampled row's draw: (its logprobs after its filters, None when it has none;
# inverse temperature; uniform)
DrawTerms = tuple[mx.array | None, float, float]

GREEDY: Sampler = greedy_sampler  # shared object: an all-greedy batch samples in one call


class Vocabulary:
    """What a model's rows need of its tokenizer: the vocabulary size, the tokens XTC never
    excludes (newline and EOS, as mlx-lm's server keeps them) and DRY's breaker ids (cached
    per set of breakers)."""

    __slots__ = ("size", "xtc_keep", "_tokenizer", "_breakers")

    def __init__(self, size: int, tokenizer: Tokenizer | None = None) -> None:
        self.size = size
        self._tokenizer = tokenizer
        self._breakers: dict[tuple[str, ...], frozenset[int]] = {}
        keep = set(tokenizer.eos_token_ids) if tokenizer is not None else set()
        if tokenizer is not None:
            keep |= set(tokenizer.encode("\n", add_special_tokens=False))
        self.xtc_keep = sorted(t for t in keep if 0 <= t < size)

    def breaker_ids(self, breakers: tuple[str, ...]) -> frozenset[int]:
        found = self._breakers.get(breakers)
        if found is None:
            tok = self._tokenizer
            found = frozenset(breaker_ids(tok, breakers) if tok is not None else ())
            self._breakers[breakers] = found
        return found


def make_sampler(params: SamplingParams, vocab_size: int, xtc_keep: Sequence[int] = ()) -> Sampler:
    """Greedy: the shared argmax. Otherwise filters, then a draw from the request's seed
    (`xtc_keep`: tokens XTC never excludes)."""
    if params.greedy:
        return GREEDY
    seed = params.seed if params.seed is not None else secrets.randbits(63)
    filters: list[Filter] = []
    if 0.0 < params.top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, params.top_p))
    if params.min_p > 0.0:
        filters.append(lambda x: apply_min_p(x, params.min_p))
    if params.xtc_probability > 0.0:
        filters.append(XtcFilter(params, seed, list(xtc_keep)))
    if 0 < params.top_k < vocab_size:
        filters.append(lambda x: apply_top_k(x, params.top_k))
    return SeededSampler(filters, params.temperature, seed)


class XtcFilter:
    """XTC ("exclude top choices", llama.cpp's `--xtc-*`): with probability xtc_probability
    per draw, every token above xtc_threshold but the least likely of them is dropped. The
    coin is the seed stream's own lane, so a seeded row stays the same in any batch."""

    __slots__ = ("_probability", "_threshold", "_keep", "_key", "_index")

    def __init__(self, params: SamplingParams, seed: int, keep: list[int]) -> None:
        self._probability = params.xtc_probability
        self._threshold = params.xtc_threshold
        self._keep = keep
        self._key = draws.stream_key(seed)
        self._index = 0

    def __call__(self, logprobs: mx.array) -> mx.array:
        coin = draws.uniform(self._key, self._index, draws.LANES - 1)
        self._index += 1
        if coin >= self._probability:
            return logprobs
        # Probability 1: mlx-lm's mask always applies; the coin above was this row's.
        return apply_xtc(logprobs, 1.0, self._threshold, self._keep)


class SeededSampler:
    """A sampled request's draws: its filters, then temperature, then an inverse-CDF draw
    whose uniform is the next of its seed's counter-based stream (one per call: a decode
    step, or a step that verifies its drafts)."""

    __slots__ = ("_filters", "_inv_temp", "_key", "_index")

    def __init__(self, filters: list[Filter], temperature: float, seed: int) -> None:
        self._filters = filters
        self._inv_temp = 1.0 / temperature
        self._key = draws.stream_key(seed)
        self._index = 0

    def __call__(self, logprobs: mx.array) -> mx.array:
        """Draw from `logprobs` [N, V] (one row: N = 1), as sample_rows draws this row."""
        u = mx.array([[draws.uniform(self._key, self._take_index())]])
        return draws.tempered_draw(self._filtered(logprobs), self._inv_temp, u)

    def draw_terms(self, row: Callable[[], mx.array]) -> DrawTerms:
        """What sample_rows needs to draw this row's next token; `row()` is its logprobs
        [1, V], read only when the request has filters."""
        u = draws.uniform(self._key, self._take_index())
        return (self._filtered(row()) if self._filters else None), self._inv_temp, u

    def verify(self, logprobs: mx.array, draft: list[int]) -> tuple[mx.array, mx.array]:
        """Speculative sampling over one row: `logprobs` [K+1, V] the target's at [next token,
        drafts...]. Every drafter mlxd has proposes deterministically (prompt lookup, the draft
        model's argmax), so the draft's q is one-hot at its tokens. Returns (accepted drafts,
        the token after them) as scalars (backend.speculative_sampling). Like a draw, it takes
        one index of the stream: lanes 1..K accept or reject, lane 0 draws the token."""
        index = self._take_index()
        x = self._filtered(logprobs).astype(mx.float32) * self._inv_temp
        p = mx.softmax(x, axis=-1)
        ids = mx.array(draft, dtype=mx.int32)
        q = rule.one_hot(ids, p.shape[-1])
        us = [draws.uniform(self._key, index, lane) for lane in range(len(draft) + 1)]
        n = rule.accepted_count(p, q, ids, mx.array(us[1:]))
        token = draws.inverse_cdf(rule.next_distribution(p, q, n), mx.array([us[0]]))
        return n, token

    def _filtered(self, logprobs: mx.array) -> mx.array:
        for f in self._filters:
            logprobs = f(logprobs)
        return logprobs

    def _take_index(self) -> int:
        self._index += 1
        return self._index - 1


def sample_rows(logprobs: mx.array, samplers: Sequence[Sampler | None]) -> mx.array:
    """One token per row of `logprobs` [B, V], `samplers[i]` row i's (None: greedy): greedy
    and seeded rows in one expression, each seeded row exactly as its sampler alone would
    draw it; a row whose draw fails (reported by its guard) takes the argmax; any other
    sampler is called on its own row."""
    inv_temps = [0.0] * len(samplers)
    us = [0.0] * len(samplers)
    filtered: dict[int, mx.array] = {}
    own: dict[int, mx.array] = {}
    for e, s in enumerate(samplers):
        if s is None or s is GREEDY:
            continue
        if isinstance(s, (SeededSampler, _GuardedSampler)):
            terms = s.draw_terms(lambda e=e: logprobs[e : e + 1])  # type: ignore[misc]
            if terms is not None:
                row, inv_temps[e], us[e] = terms
                if row is not None:
                    filtered[e] = row
        else:
            own[e] = s(logprobs[e : e + 1])
    tokens = _draw_or_argmax(logprobs, filtered, inv_temps, us)
    return put_rows(tokens, own) if own else tokens


def _draw_or_argmax(
    logprobs: mx.array, filtered: dict[int, mx.array], inv_temps: list[float], us: list[float]
) -> mx.array:
    drawn = [t > 0.0 for t in inv_temps]
    if not any(drawn):
        return mx.argmax(logprobs, axis=-1)
    logits = put_rows(logprobs, filtered) if filtered else logprobs
    inv = mx.array([[t or 1.0] for t in inv_temps])
    tokens = draws.tempered_draw(logits, inv, mx.array([[u] for u in us]))
    if all(drawn):
        return tokens
    return mx.where(mx.array(drawn), tokens, mx.argmax(logprobs, axis=-1).astype(mx.uint32))


def make_processors(params: SamplingParams, breakers: Collection[int] = ()) -> list[Processor]:
    """logit_bias (first: logits_processing.BatchBias relies on it), then the repetition /
    presence / frequency penalties, sharing one window, then DRY (`breakers`: its breaker
    token ids)."""
    window = params.repetition_context_size
    procs: list[Processor] = [LogitBias(params.logit_bias)] if params.logit_bias else []
    procs += make_logits_processors(
        repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1.0 else None,
        repetition_context_size=window,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=window,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=window,
    )
    if params.dry:
        procs.append(DryPenalty(params, breakers))
    return procs


def guard_sampler(
    sampler: Sampler, on_error: OnError, hook: FaultHook | None, request_id: str
) -> Sampler:
    """Wrap so an exception fails only this request: it is reported and argmax stands in
    for the draw until the engine removes the request at the step boundary. A SeededSampler
    keeps its `verify` and `draw_terms`, guarded the same way."""
    guarded = _GuardedSampler(sampler, on_error, hook, request_id)
    return guarded if isinstance(sampler, SeededSampler) else guarded.__call__


class _GuardedSampler:
    """guard_sampler's wrapper: draws (and a SeededSampler's verifications) that fail
    report the error and fall back to argmax."""

    __slots__ = ("_sampler", "_on_error", "_hook", "_request_id")

    def __init__(
        self, sampler: Sampler, on_error: OnError, hook: FaultHook | None, request_id: str
    ) -> None:
        self._sampler = sampler
        self._on_error = on_error
        self._hook = hook
        self._request_id = request_id

    def __call__(self, logprobs: mx.array) -> mx.array:
        try:
            if self._hook is not None:
                self._hook("sample", self._request_id)
            return self._sampler(logprobs)
        except Exception as exc:
            self._on_error(exc)
            return mx.argmax(logprobs, axis=-1)

    def draw_terms(self, row: Callable[[], mx.array]) -> DrawTerms | None:
        """The seeded sampler's draw_terms; None when it failed (reported): argmax."""
        try:
            if self._hook is not None:
                self._hook("sample", self._request_id)
            return self._seeded().draw_terms(row)
        except Exception as exc:
            self._on_error(exc)
            return None

    def verify(self, logprobs: mx.array, draft: list[int]) -> tuple[mx.array, mx.array]:
        try:
            if self._hook is not None:
                self._hook("sample", self._request_id)
            return self._seeded().verify(logprobs, draft)
        except Exception as exc:
            self._on_error(exc)
            return mx.array(0), mx.argmax(logprobs[0], axis=-1)

    def _seeded(self) -> SeededSampler:
        assert isinstance(self._sampler, SeededSampler)  # guard_sampler: only then exposed
        return self._sampler


def row_sampling(
    params: SamplingParams,
    vocab: Vocabulary,
    on_error: OnError,
    hook: FaultHook | None,
    request_id: str,
    masks: Sequence[Processor] = (),
) -> tuple[Sampler, list[Processor]]:
    """One row's sampler and logits processors (`masks`, a reasoning budget's and a
    grammar's, last), each
    guarded so that an exception fails only this request (a plain greedy row is not wrapped:
    nothing in it can raise)."""
    sampler = make_sampler(params, vocab.size, vocab.xtc_keep)
    if sampler is not GREEDY or hook is not None:
        sampler = guard_sampler(sampler, on_error, hook, request_id)
    breakers = vocab.breaker_ids(params.dry_sequence_breakers) if params.dry else ()
    procs = [guard_processor(p, on_error) for p in make_processors(params, breakers)]
    procs += [guard_processor(mask, on_error) for mask in masks]
    return sampler, procs


def guard_processor(proc: Processor, on_error: OnError) -> Processor:
    """Wrap so an exception fails only this request; the logits pass through unchanged."""
    return GuardedProcessor(proc, on_error)


def token_logprob(row: mx.array, token: int, top_n: int) -> TokenLogprob:
    """The sampled token's log-probability and the `top_n` best alternatives from one row."""
    lp = float(cast(float, row[token].item()))
    if top_n <= 0:
        return TokenLogprob(token, lp)
    top_n = min(top_n, row.shape[-1])
    idx = mx.argpartition(-row, kth=top_n - 1)[:top_n]
    vals = row[idx]
    order = mx.argsort(-vals)
    ids = cast("list[int]", idx[order].tolist())  # a 1-d array: a flat list
    lps = cast("list[float]", vals[order].tolist())
    return TokenLogprob(token, lp, tuple(zip(ids, lps, strict=True)))
