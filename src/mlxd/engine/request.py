"""EngineRequest (what callers submit) and Request (the engine's record of one request)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import StrEnum

from mlxd.config import LIMITS
from mlxd.engine.collector import Collector
from mlxd.errors import ContextOverflow, InvalidRequest
from mlxd.types import FinishReason, SamplingParams, Timings, Usage


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A generation request in token ids. `max_tokens_cap` is the caller's default cap
    (the server passes half the window when the client gave no max_tokens)."""

    model: str
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens_cap: int | None = None


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
    max_new: int
    collector: Collector
    status: RequestStatus = RequestStatus.WAITING
    uid: int | None = None  # the backend's sequence id once admitted
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: BaseException | None = None  # set by a guarded sampler/processor that failed
    submitted_at: float = field(default_factory=time.monotonic)
    admitted_at: float | None = None
    first_token_at: float | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def kv_tokens(self) -> int:
        """Most KV positions this request can hold: what admission budgets for."""
        return self.prompt_len + self.max_new

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def usage(self) -> Usage:
        return Usage(self.prompt_len, self.completion_tokens, self.cached_tokens)

    def timings(self, now: float) -> Timings:
        start = self.submitted_at
        queued = (self.admitted_at or now) - start
        ttft = (self.first_token_at - start) if self.first_token_at else 0.0
        return Timings(queued_s=queued, ttft_s=ttft, total_s=now - start)

    def record_error(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc


FINISH_BY_BACKEND = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}


def budget(
    prompt_len: int,
    context_window: int,
    params: SamplingParams,
    cap: int | None,
    ceiling: int | None,
) -> int:
    """New tokens allowed: min(max_tokens, cap, ceiling, window - prompt). Raises
    ContextOverflow when the prompt alone fills the window."""
    room = context_window - prompt_len
    if room <= 0:
        raise ContextOverflow(
            f"prompt has {prompt_len} tokens but the context window is {context_window}: "
            f"no room to generate",
            param="messages",
        )
    limits = [params.max_tokens, cap, ceiling, room]
    return int(min(math.inf if v is None else v for v in limits))


def validate(req: EngineRequest, vocab_size: int) -> None:
    """Raise InvalidRequest naming the first bad field."""
    p = req.params
    if not req.prompt_ids:
        raise InvalidRequest("prompt is empty", param="prompt")
    if any(not isinstance(t, int) or t < 0 or t >= vocab_size for t in req.prompt_ids):
        raise InvalidRequest(f"prompt token ids must be in [0, {vocab_size})", param="prompt")
    _check(math.isfinite(p.temperature) and p.temperature >= 0, "temperature", ">= 0")
    _check(0.0 < p.top_p <= 1.0, "top_p", "in (0, 1]")
    _check(0 <= p.top_k <= LIMITS["top_k"], "top_k", f"in [0, {LIMITS['top_k']}]")
    _check(0.0 <= p.min_p <= 1.0, "min_p", "in [0, 1]")
    _check(
        math.isfinite(p.repetition_penalty) and p.repetition_penalty > 0,
        "repetition_penalty",
        "> 0",
    )
    rcs = LIMITS["repetition_context_size"]
    _check(1 <= p.repetition_context_size <= rcs, "repetition_context_size", f"in [1, {rcs}]")
    _check(-2.0 <= p.presence_penalty <= 2.0, "presence_penalty", "in [-2, 2]")
    _check(-2.0 <= p.frequency_penalty <= 2.0, "frequency_penalty", "in [-2, 2]")
    _check(len(p.logit_bias) <= LIMITS["logit_bias_entries"], "logit_bias", "not too long")
    for tok, bias in p.logit_bias:
        _check(0 <= tok < vocab_size, "logit_bias", f"token ids in [0, {vocab_size})")
        _check(math.isfinite(bias) and -100 <= bias <= 100, "logit_bias", "values in [-100, 100]")
    if p.max_tokens is not None:
        mt = LIMITS["max_tokens"]
        _check(1 <= p.max_tokens <= mt, "max_tokens", f"in [1, {mt}]")
    if req.max_tokens_cap is not None:
        _check(req.max_tokens_cap >= 1, "max_tokens_cap", ">= 1")
    _check(all(0 <= t < vocab_size for t in p.stop_token_ids), "stop_token_ids", "in vocab")
    tl = LIMITS["top_logprobs"]
    _check(0 <= p.top_logprobs <= tl, "top_logprobs", f"in [0, {tl}]")
    _check(p.seed is None or 0 <= p.seed < 1 << 64, "seed", "in [0, 2**64)")


def _check(ok: bool, param: str, rule: str) -> None:
    if not ok:
        raise InvalidRequest(f"{param} must be {rule}", param=param)
