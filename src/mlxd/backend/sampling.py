"""Per-request samplers and logits processors over mlx-lm's `sample_utils`.

mlx-lm's `make_sampler` draws from the global `mx.random` state, so two seeded requests in one
batch would disturb each other; here each sampled request owns a PRNG key that it splits once
per token, which makes seeded requests reproducible inside any batch. The filters (top-p, min-p,
top-k) and the penalty processors are mlx-lm's own.
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
    state = {"key": mx.random.key(seed)}
    inv_temp = 1.0 / params.temperature

    def sample(logprobs: mx.array) -> mx.array:
        for f in filters:
            logprobs = f(logprobs)
        key, sub = mx.random.split(state["key"])
        state["key"] = key
        return mx.random.categorical(logprobs * inv_temp, key=sub)

    return sample


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
    for the draw until the engine removes the request at the step boundary."""

    def guarded(logprobs: mx.array) -> mx.array:
        try:
            if hook is not None:
                hook("sample", request_id)
            return sampler(logprobs)
        except Exception as exc:
            on_error(exc)
            return mx.argmax(logprobs, axis=-1)

    return guarded


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
