"""Per-request samplers and logits processors over mlx-lm's `sample_utils`.

mlx-lm's `make_sampler` draws from the global `mx.random` state, so two seeded requests in one
batch would disturb each other; here each sampled request owns a PRNG key that it splits once
per decode step (a step that verifies its drafts too), which makes seeded requests reproducible
inside any batch. The filters (top-p, min-p, top-k) and the penalty processors are mlx-lm's own.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import cast

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    greedy_sampler,
    make_logits_processors,
)

from mlxd.backend import speculative_sampling as rule
from mlxd.backend.outputs import FaultHook
from mlxd.types import SamplingParams, TokenLogprob

Sampler = Callable[[mx.array], mx.array]
Processor = Callable[[mx.array, mx.array], mx.array]
OnError = Callable[[BaseException], None]

GREEDY: Sampler = greedy_sampler  # shared object: an all-greedy batch samples in one call


def make_sampler(params: SamplingParams, vocab_size: int) -> Sampler:
    """Greedy: the shared argmax. Otherwise filters then a categorical draw with an own key."""
    if params.greedy:
        return GREEDY
    filters: list[Callable[[mx.array], mx.array]] = []
    if 0.0 < params.top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, params.top_p))
    if params.min_p > 0.0:
        filters.append(lambda x: apply_min_p(x, params.min_p))
    if 0 < params.top_k < vocab_size:
        filters.append(lambda x: apply_top_k(x, params.top_k))
    seed = params.seed if params.seed is not None else secrets.randbits(63)
    return SeededSampler(filters, params.temperature, seed)


class SeededSampler:
    """A sampled request's draws: its filters, then temperature, then a categorical draw
    with its own PRNG key, split once per call (one decode step)."""

    __slots__ = ("_filters", "_inv_temp", "_key")

    def __init__(
        self, filters: list[Callable[[mx.array], mx.array]], temperature: float, seed: int
    ) -> None:
        self._filters = filters
        self._inv_temp = 1.0 / temperature
        self._key = mx.random.key(seed)

    def __call__(self, logprobs: mx.array) -> mx.array:
        return mx.random.categorical(self._logits(logprobs), key=self._next_key())

    def verify(self, logprobs: mx.array, draft: list[int]) -> tuple[mx.array, mx.array]:
        """Speculative sampling over one row: `logprobs` [K+1, V] the target's at [next token,
        drafts...]. Every drafter mlxd has proposes deterministically (prompt lookup, the draft
        model's argmax), so the draft's q is one-hot at its tokens. Returns (accepted drafts,
        the token after them) as scalars (backend.speculative_sampling).
        Like a draw, it uses one split of the key."""
        p = mx.softmax(self._logits(logprobs).astype(mx.float32), axis=-1)
        ids = mx.array(draft, dtype=mx.int32)
        q = rule.one_hot(ids, p.shape[-1])
        u_key, token_key = mx.random.split(self._next_key())
        n = rule.accepted_count(p, q, ids, mx.random.uniform(shape=(len(draft),), key=u_key))
        token = mx.random.categorical(mx.log(rule.next_distribution(p, q, n)), key=token_key)
        return n, token

    def _logits(self, logprobs: mx.array) -> mx.array:
        """The distribution this sampler draws from, as unnormalized log-probabilities."""
        for f in self._filters:
            logprobs = f(logprobs)
        return logprobs * self._inv_temp

    def _next_key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub


def make_processors(params: SamplingParams) -> list[Processor]:
    """logit_bias and the repetition / presence / frequency penalties, sharing one window."""
    window = params.repetition_context_size
    procs: list[Processor] = make_logits_processors(
        logit_bias=dict(params.logit_bias) or None,
        repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1.0 else None,
        repetition_context_size=window,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=window,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=window,
    )
    return procs


def guard_sampler(
    sampler: Sampler, on_error: OnError, hook: FaultHook | None, request_id: str
) -> Sampler:
    """Wrap so an exception fails only this request: it is reported and argmax stands in
    for the draw until the engine removes the request at the step boundary. A SeededSampler
    keeps its `verify`, guarded the same way."""
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

    def verify(self, logprobs: mx.array, draft: list[int]) -> tuple[mx.array, mx.array]:
        try:
            if self._hook is not None:
                self._hook("sample", self._request_id)
            assert isinstance(self._sampler, SeededSampler)  # guard_sampler: only then exposed
            return self._sampler.verify(logprobs, draft)
        except Exception as exc:
            self._on_error(exc)
            return mx.array(0), mx.argmax(logprobs[0], axis=-1)


def guard_processor(proc: Processor, on_error: OnError) -> Processor:
    """Wrap so an exception fails only this request; the logits pass through unchanged."""

    def guarded(tokens: mx.array, logits: mx.array) -> mx.array:
        try:
            return proc(tokens, logits)
        except Exception as exc:
            on_error(exc)
            return logits

    return guarded


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
