"""EngineHealth and EngineStats snapshots, and the counters the engine thread keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from mlxd.backend.api import ClusterStats, RankStatus
from mlxd.types import FinishReason

__all__ = ["ClusterStats", "Counters", "EngineHealth", "EngineState", "EngineStats", "RankStatus"]


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


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """ok is False when the engine failed, stalled or closed; `detail` says why."""

    ok: bool
    state: EngineState
    detail: str | None = None
    blas: str = ""  # the CPU BLAS, as in EngineStats
    cluster: ClusterStats | None = None  # as in EngineStats


@dataclass(frozen=True, slots=True)
class EngineStats:
    running: int
    waiting: int
    prefix_cache_hits: int
    cached_tokens_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    requests_by_finish_reason: dict[str, int]
    prefilled_tokens_total: int = 0  # prompt tokens actually run (prompt minus cache hits)
    requests_total: int = 0
    steps_total: int = 0
    prefix_cache_bytes: int = 0
    prefix_cache_entries: int = 0
    prefix_cache_misses: int = 0  # prompts that reused nothing (cache on)
    prefix_cache_evictions: int = 0  # entries dropped to stay within prefix_cache_bytes
    prefix_cache_pruned: int = 0  # entries a newer one made redundant (same conversation)
    prefix_cache_stored: int = 0  # snapshots stored
    prefix_cache_files_rejected: int = 0  # disk tier files deleted because they did not check
    kv_tokens_in_use: int = 0
    model: str | None = None
    models_loaded: tuple[str, ...] = ()
    blas: str = ""  # the CPU BLAS: "mkl" or "reference" (see docs/usage/blas.md)
    draft_tokens_total: int = 0  # draft tokens verified (speculative decoding)
    accepted_tokens_total: int = 0  # of those, accepted
    cluster: ClusterStats | None = None  # distributed serve: the ranks (backend.distributed)


@dataclass(slots=True)
class Counters:
    """Mutated only by the engine thread; read (racily but safely) by stats()."""

    requests_total: int = 0
    steps_total: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_misses: int = 0
    cached_tokens_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefilled_tokens_total: int = 0
    draft_tokens_total: int = 0
    accepted_tokens_total: int = 0
    # Every key present from the start, so readers never see the dict change size.
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
