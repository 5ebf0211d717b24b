"""EngineHealth and EngineStats snapshots, and the counters the engine thread keeps."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from mlxd.backend.api import ClusterStats, PrefixCacheStats, RankStatus
from mlxd.types import DraftKind, FinishReason, ModelKind

__all__ = [
    "ClusterStats",
    "Counters",
    "EngineHealth",
    "EngineState",
    "EngineStats",
    "PrefixCacheStats",
    "RankStatus",
    "ResidentModel",
]


class EngineState(StrEnum):
    READY = "ready"
    DRAINING = "draining"  # takes no new submits; accepted requests still run
    STALLED = "stalled"  # the watchdog saw no progress: every handle failed
    FAILED = "failed"  # a fatal fault: every handle failed
    CLOSED = "closed"

    @property
    def open(self) -> bool:
        """The engine thread still runs requests (ready or draining)."""
        return self in (EngineState.READY, EngineState.DRAINING)


_KINDS = tuple(k.value for k in DraftKind if k is not DraftKind.NONE)


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """ok is False when the engine failed, stalled or closed; `detail` says why."""

    ok: bool
    state: EngineState
    detail: str | None = None
    blas: str = ""  # the CPU BLAS, as in EngineStats
    cluster: ClusterStats | None = None  # as in EngineStats
    kv_bytes_in_use: int = 0  # as in EngineStats
    kv_budget_bytes: int | None = None


@dataclass(slots=True)
class Counters:
    """Totals since start. Mutated only by the engine thread; stats() hands out snapshots."""

    requests_total: int = 0
    steps_total: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_misses: int = 0  # prompts that reused nothing (cache on)
    cached_tokens_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefilled_tokens_total: int = 0  # prompt tokens actually run (prompt minus cache hits)
    draft_tokens_total: int = 0  # draft tokens verified (speculative decoding)
    accepted_tokens_total: int = 0  # of those, accepted
    embedded_tokens_total: int = 0  # input tokens of embedding requests run
    parked_steps_total: int = 0  # steps whose rows offered drafts, none verified (the policy)
    # Draft tokens verified / accepted by draft kind (ngram, model, mtp); every kind present.
    drafted_by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_KINDS, 0))
    accepted_by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_KINDS, 0))
    # Finished requests by finish reason; every key present from the start, so readers
    # never see the dict change size.
    by_reason: dict[str, int] = field(default_factory=lambda: {r.value: 0 for r in FinishReason})

    def admitted(self, prompt_len: int, cached: int, cache_on: bool = True) -> None:
        """A request started: `cached` of its `prompt_len` tokens came from the prefix cache
        (the backend reuses no prefix shorter than a handful of tokens: 0 then)."""
        self.prompt_tokens_total += prompt_len
        self.prefilled_tokens_total += prompt_len - cached
        if cached:
            self.prefix_cache_hits += 1
            self.cached_tokens_total += cached
        elif cache_on:
            self.prefix_cache_misses += 1

    def snapshot(self) -> Counters:
        """A copy for a reader (the engine thread goes on mutating this one)."""
        return replace(
            self,
            by_reason=dict(self.by_reason),
            drafted_by_kind=dict(self.drafted_by_kind),
            accepted_by_kind=dict(self.accepted_by_kind),
        )


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One engine.stats() snapshot: what runs now, the counters since start, the prefix
    cache, and the ranks of a distributed job."""

    running: int
    waiting: int
    counters: Counters = field(default_factory=Counters)
    cache: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    kv_tokens_in_use: int = 0
    kv_bytes_in_use: int = 0  # KV bytes the running requests can grow to (admission's count)
    kv_budget_bytes: int | None = None  # what they are admitted under (None: no byte budget)
    model: str | None = None
    models_loaded: tuple[str, ...] = ()
    blas: str = ""  # the CPU BLAS: "mkl" or "reference" (see docs/usage/blas.md)
    cluster: ClusterStats | None = None  # distributed serve: the ranks (backend.distributed)


@dataclass(frozen=True, slots=True)
class ResidentModel:
    """One loaded model as Engine.resident() sees it now (what `mlxd ps` shows)."""

    name: str
    path: Path
    kind: ModelKind
    weight_bytes: int  # its parameters and its draft's, as loaded
    draft: str | None  # the draft model loaded with it
    running: int  # requests prefilling or decoding
    queued: int  # requests accepted, not yet admitted
    pinned: bool  # never unloaded (the server's default model)
    idle_seconds: float  # since its last load, submit or finish
    ttl_seconds: float | None  # how long it may stay idle (its keep-alive, else the TTL)
    unloads_in_seconds: float | None  # None: not while pinned, in use, or without a TTL
