"""What one backend step returns, and the fault-injection hook (plain values: no mlx here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mlxd.types import TokenLogprob

# Test hook: called as hook(site, request_id). Site "sample" runs inside one request's sampler
# (an exception fails that request only); site "step" runs once per engine step on the engine
# thread (an exception there is a fatal engine fault). Production code leaves it None.
FaultHook = Callable[[str, str | None], None]


@dataclass(slots=True)
class StepOutput:
    """One generated token of one sequence; `finish` is "stop", "length" or None."""

    uid: int
    token: int
    finish: str | None
    logprob: TokenLogprob | None


@dataclass(frozen=True, slots=True)
class DraftCount:
    """One sequence's speculation in one step: draft tokens verified, and how many of them
    the target accepted."""

    drafted: int
    accepted: int


@dataclass(slots=True)
class StepResult:
    """The step's tokens, and the sequences whose sampler or logits processor raised during
    it (uid -> the first exception): the engine fails those and ignores their tokens.
    `drafts` holds the rows that verified drafts in the step (uid -> counts)."""

    tokens: list[StepOutput]
    failed: dict[int, BaseException] = field(default_factory=dict)
    drafts: dict[int, DraftCount] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """The prefix cache now (bytes, entries) and since start (the counters)."""

    bytes: int = 0
    entries: int = 0
    stored: int = 0  # snapshots stored
    evictions: int = 0  # entries dropped to stay within the byte budget
    pruned: int = 0  # entries made redundant by a newer one (same conversation, or trimmable)


@dataclass(frozen=True, slots=True)
class RankStatus:
    """One rank of a distributed job as rank 0 sees it. `up` is None where nothing watches
    it (no heartbeat under that launcher); `heartbeat_age` is seconds since its last beat."""

    rank: int
    up: bool | None
    heartbeat_age: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """A distributed job (backend.distributed): its ranks, its split, and rank 0's lockstep
    broadcasts (count, and seconds in their collectives after rank 0's queued work is done)."""

    size: int
    layout: str  # "tensor" or "pipeline"
    ranks: tuple[RankStatus, ...]
    broadcasts: int = 0
    broadcast_seconds: float = 0.0
