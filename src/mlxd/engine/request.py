"""EngineRequest (what callers submit) and Request (the engine's record of one request)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from mlxd.config import LIMITS, SAMPLING_BOUNDS
from mlxd.engine.collector import Collector
from mlxd.engine.loops import LoopWatch
from mlxd.errors import ContextOverflow, InvalidRequest
from mlxd.types import (
    DraftKind,
    ImageInputs,
    PromptBoundaries,
    ReasoningMarkers,
    SamplingParams,
    Timings,
    Usage,
)

if TYPE_CHECKING:  # llguidance loads with the first constrained request
    from mlxd.backend.api import CompiledGrammar


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A generation request in token ids (`budget` bounds params.max_tokens; None: the room
    the context window leaves). `grammar`, compiled before submit
    (backend.structured.grammar), constrains the output token by token; `boundaries` are
    where the chat layer's prompt parts end (prefix-cache snapshot points). `images` (vision
    models) are merged into the prompt's embeddings at prefill. `until_shown`: the consumer
    may hold tokens back as text; every token is delivered at once until it calls
    RequestHandle.shown(). `reasoning`: the model's reasoning markers, which
    params.max_reasoning_tokens needs (without them it has no effect)."""

    model: str
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    grammar: CompiledGrammar | None = None
    boundaries: PromptBoundaries = field(default_factory=PromptBoundaries)
    images: ImageInputs | None = None
    until_shown: bool = False
    reasoning: ReasoningMarkers | None = None


class RequestStatus(StrEnum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Request:
    """One request inside the engine; only the engine thread mutates it after submit."""

    request_id: str
    model: str
    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int  # the generation budget: what `budget` gave this request
    collector: Collector
    grammar: CompiledGrammar | None = None
    boundaries: PromptBoundaries = field(default_factory=PromptBoundaries)
    images: ImageInputs | None = None
    reasoning: ReasoningMarkers | None = None
    loops: LoopWatch | None = None  # loop detection, when the request asks for it
    status: RequestStatus = RequestStatus.WAITING
    uid: int | None = None  # the backend's sequence id once admitted
    kv_bytes: int = 0  # KV bytes kv_tokens positions take on its model
    kv_budget: int | None = None  # the byte budget it is admitted under (None: none)
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding: draft tokens verified for this request
    accepted_draft_tokens: int = 0
    submitted_at: float = field(default_factory=time.monotonic)
    admitted_at: float | None = None
    first_token_at: float | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def kv_tokens(self) -> int:
        """Most KV positions this request can hold: what admission budgets for."""
        return self.prompt_len + self.max_tokens

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def usage(self) -> Usage:
        return Usage(self.prompt_len, self.completion_tokens, self.cached_tokens)

    def timings(self, now: float) -> Timings:
        start = self.submitted_at
        queued = (self.admitted_at or now) - start
        ttft = (self.first_token_at - start) if self.first_token_at else 0.0
        return Timings(
            queued_s=queued,
            ttft_s=ttft,
            total_s=now - start,
            draft_tokens=self.draft_tokens,
            accepted_draft_tokens=self.accepted_draft_tokens,
            draft_kind=_drafting_kind(self.params.draft_kind),
        )


def budget(
    prompt_len: int,
    context_window: int,
    params: SamplingParams,
    ceiling: int | None,
) -> int:
    """New tokens allowed: min(max_tokens, ceiling, window - prompt). Raises
    ContextOverflow when the prompt alone fills the window."""
    room = context_window - prompt_len
    if room <= 0:
        raise ContextOverflow(
            f"prompt has {prompt_len} tokens but the context window is {context_window}: "
            f"no room to generate",
            param="messages",
            prompt_tokens=prompt_len,
            window=context_window,
        )
    limits = [params.max_tokens, ceiling, room]
    return int(min(math.inf if v is None else v for v in limits))


def validate(req: EngineRequest, vocab_size: int, takes_images: bool = False) -> None:
    """Raise InvalidRequest naming the first bad field. Sampling values must lie in
    config.SAMPLING_BOUNDS: the ranges the option table (CLI flags, HTTP fields) accepts.
    Images need a vision model (`takes_images`) and one run of positions each."""
    p = req.params
    if not req.prompt_ids:
        raise InvalidRequest("prompt is empty", param="prompt")
    if req.images is not None:
        _check_images(req.images, req.prompt_ids, takes_images)
    if any(not isinstance(t, int) or t < 0 or t >= vocab_size for t in req.prompt_ids):
        raise InvalidRequest(f"prompt token ids must be in [0, {vocab_size})", param="prompt")
    for name, bounds in SAMPLING_BOUNDS.items():
        value = getattr(p, name)
        if name != "logit_bias" and value is not None:  # None: unset (seed, max_tokens)
            bounds.check(name, value)
    breakers = p.dry_sequence_breakers
    _check(len(breakers) <= LIMITS["dry_sequence_breakers"], "dry_sequence_breakers", "short")
    limit = LIMITS["dry_breaker_chars"]
    _check(all(0 < len(b) <= limit for b in breakers), "dry_sequence_breakers", "short strings")
    _check(len(p.logit_bias) <= LIMITS["logit_bias_entries"], "logit_bias", "not too long")
    for tok, bias in p.logit_bias:
        _check(0 <= tok < vocab_size, "logit_bias", f"token ids in [0, {vocab_size})")
        SAMPLING_BOUNDS["logit_bias"].check("logit_bias", bias)
    in_prompt = all(0 <= at <= len(req.prompt_ids) for at in req.boundaries.positions())
    _check(in_prompt, "boundaries", "positions within the prompt")
    _check(all(0 <= t < vocab_size for t in p.stop_token_ids), "stop_token_ids", "in vocab")
    marks = req.reasoning
    if marks is not None:
        ids = (*marks.start, *marks.end)
        _check(bool(marks.end) and all(0 <= t < vocab_size for t in ids), "reasoning", "in vocab")
    if req.grammar is not None and p.ignore_eos:
        # A finished answer can only be followed by EOS: it must end the sequence.
        raise InvalidRequest(
            f"ignore_eos cannot be combined with {req.grammar.param}", param="ignore_eos"
        )


def _check_images(images: ImageInputs, prompt_ids: list[int], takes_images: bool) -> None:
    if not takes_images:
        raise InvalidRequest("this model takes text only: it cannot read images", param="messages")
    want = sum(image.tokens for image in images.images)
    if prompt_ids.count(images.token_id) != want or prompt_ids[-1] == images.token_id:
        raise InvalidRequest("the prompt does not hold its images' positions", param="messages")


def _check(ok: bool, param: str, rule: str) -> None:
    if not ok:
        raise InvalidRequest(f"{param} must be {rule}", param=param)


def _drafting_kind(kind: DraftKind | None) -> str | None:
    return kind.value if kind is not None and kind is not DraftKind.NONE else None
