"""Prometheus text exposition, written by hand (no client library dependency).

Counters and histograms are updated on the event loop thread only, so no locks.
"""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlxd.types import FinishReason

if TYPE_CHECKING:
    from mlxd.engine import ClusterStats, EngineStats
    from mlxd.engine.stats import Counters

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_FINISH_REASONS = {reason.value: 0 for reason in FinishReason}
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# (what of engine.stats(), metric name, type, help)
ENGINE_GAUGES: tuple[tuple[Callable[[EngineStats], int], str, str, str], ...] = (
    (lambda s: s.running, "mlxd_running_requests", "gauge", "requests decoding or prefilling now"),
    (lambda s: s.waiting, "mlxd_queue_depth", "gauge", "requests waiting for a batch slot"),
    (lambda s: s.counters.prefix_cache_hits, "mlxd_prefix_cache_hits_total", "counter",
     "prompts that reused KV"),
    (lambda s: s.counters.prefix_cache_misses, "mlxd_prefix_cache_misses_total", "counter",
     "prompts that reused no KV (a handful of shared tokens is a miss)"),
    (lambda s: s.counters.cached_tokens_total, "mlxd_cached_prompt_tokens_total", "counter",
     "prompt tokens reused"),
    (lambda s: s.cache.evictions, "mlxd_prefix_cache_evictions_total", "counter",
     "prefix cache snapshots dropped to stay within its byte budget"),
    (lambda s: s.cache.pruned, "mlxd_prefix_cache_pruned_total", "counter",
     "prefix cache snapshots a newer one made redundant (same conversation)"),
    (lambda s: s.cache.files_rejected, "mlxd_prefix_cache_files_rejected_total", "counter",
     "prefix cache disk files deleted because they did not check (corrupt, foreign, "
     "or not a cache of their model)"),
    (lambda s: s.cache.bytes, "mlxd_prefix_cache_bytes", "gauge",
     "bytes the prefix cache holds, as its budget counts them: KV arrays, their objects and "
     "the index that finds them"),
    (lambda s: s.cache.kv_bytes, "mlxd_prefix_cache_kv_bytes", "gauge",
     "of mlxd_prefix_cache_bytes, the KV arrays alone"),
    (lambda s: s.cache.entries, "mlxd_prefix_cache_entries", "gauge", "prefix cache snapshots"),
    (lambda s: s.counters.draft_tokens_total, "mlxd_draft_tokens_total", "counter",
     "speculative decoding: draft tokens the target verified"),
    (lambda s: s.counters.accepted_tokens_total, "mlxd_accepted_draft_tokens_total", "counter",
     "speculative decoding: draft tokens accepted"),
    (lambda s: s.kv_bytes_in_use, "mlxd_kv_bytes_in_use", "gauge",
     "KV bytes the running requests can grow to (prompt + max new tokens each, at the "
     "model's bytes per token): what admission counts"),
    (lambda s: s.kv_budget_bytes or 0, "mlxd_kv_budget_bytes", "gauge",
     "the KV byte budget requests are admitted under (0: none known)"),
    (lambda s: max((s.kv_budget_bytes or 0) - s.kv_bytes_in_use, 0), "mlxd_kv_bytes_free",
     "gauge", "of mlxd_kv_budget_bytes, what no running request can claim"),
)  # fmt: skip


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)  # last slot: +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str) -> Iterable[str]:
        running = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            yield f'{name}_bucket{{le="{bound}"}} {running}'
        yield f'{name}_bucket{{le="+Inf"}} {self.n}'
        yield f"{name}_sum {self.total:.6f}"
        yield f"{name}_count {self.n}"


@dataclass(slots=True)
class Metrics:
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    # Generation requests by the finish reason their client saw; every reason from the start.
    finished: Counter[str] = field(default_factory=lambda: Counter(_FINISH_REASONS))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))

    def count_request(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    def render(self, engine_stats: EngineStats, active_http: int) -> str:
        """The /metrics body; engine_stats is engine.stats()."""
        out: list[str] = []
        _header(out, "mlxd_http_requests_total", "counter", "HTTP requests by route and status")
        for (route, status), n in sorted(self.requests.items()):
            out.append(f'mlxd_http_requests_total{{route="{route}",status="{status}"}} {n}')
        _header(out, "mlxd_active_http_requests", "gauge", "generation requests in flight")
        out.append(f"mlxd_active_http_requests {active_http}")
        counters = engine_stats.counters
        _header(
            out,
            "mlxd_prompt_tokens_total",
            "counter",
            "prompt tokens of the requests started (those read from the prefix cache too)",
        )
        out.append(f"mlxd_prompt_tokens_total {counters.prompt_tokens_total}")
        _header(
            out,
            "mlxd_generation_tokens_total",
            "counter",
            "tokens generated (those of requests cancelled before their end too)",
        )
        out.append(f"mlxd_generation_tokens_total {counters.generation_tokens_total}")
        _header(out, "mlxd_time_to_first_token_seconds", "histogram", "request to first token")
        out.extend(self.ttft.lines("mlxd_time_to_first_token_seconds"))
        _header(out, "mlxd_inter_token_latency_seconds", "histogram", "gap between deltas")
        out.extend(self.itl.lines("mlxd_inter_token_latency_seconds"))
        _header(
            out,
            "mlxd_requests_finished_total",
            "counter",
            "generation requests by the finish reason their client saw (tool_calls, stop, "
            "length; cancelled: the client left or cancelled; error)",
        )
        for reason, n in sorted(self.finished.items()):
            out.append(f'mlxd_requests_finished_total{{reason="{reason}"}} {n}')
        _draft_lines(out, counters)
        _header(out, "mlxd_models_loaded", "gauge", "models loaded in the engine now")
        out.append(f"mlxd_models_loaded {len(engine_stats.models_loaded)}")
        if engine_stats.blas:
            _header(out, "mlxd_blas_info", "gauge", "the CPU BLAS mlx's matmuls use (label)")
            out.append(f'mlxd_blas_info{{blas="{engine_stats.blas}"}} 1')
        for value_of, name, kind, help_text in ENGINE_GAUGES:
            _header(out, name, kind, help_text)
            out.append(f"{name} {value_of(engine_stats)}")
        if engine_stats.cluster is not None:
            _cluster_lines(out, engine_stats.cluster)
        resident = resident_bytes()
        if resident is not None:
            _header(out, "process_resident_memory_bytes", "gauge", "resident memory (RSS)")
            out.append(f"process_resident_memory_bytes {resident}")
        return "\n".join(out) + "\n"


def _draft_lines(out: list[str], counters: Counters) -> None:
    """Speculation by draft kind, and the steps the drafting policy parked it."""
    for name, counts, what in (
        ("mlxd_draft_tokens_by_kind_total", counters.drafted_by_kind, "verified"),
        ("mlxd_accepted_draft_tokens_by_kind_total", counters.accepted_by_kind, "accepted"),
    ):
        _header(out, name, "counter", f"speculative decoding: draft tokens {what}, by kind")
        out.extend(f'{name}{{kind="{kind}"}} {n}' for kind, n in sorted(counts.items()))
    _header(
        out,
        "mlxd_speculation_parked_steps_total",
        "counter",
        "decode steps whose rows offered drafts and the drafting policy verified none "
        "(a wider verify would lose there)",
    )
    out.append(f"mlxd_speculation_parked_steps_total {counters.parked_steps_total}")


def _cluster_lines(out: list[str], cluster: ClusterStats) -> None:
    """A distributed job: its size and split, each rank's liveness, rank 0's broadcasts."""
    _header(out, "mlxd_distributed_ranks", "gauge", "ranks of the distributed job (label: split)")
    out.append(f'mlxd_distributed_ranks{{layout="{cluster.layout}"}} {cluster.size}')
    _header(out, "mlxd_rank_up", "gauge", "1 while a rank is alive (its heartbeat arrives)")
    out.extend(
        f'mlxd_rank_up{{rank="{r.rank}"}} {int(r.up)}' for r in cluster.ranks if r.up is not None
    )
    _header(
        out, "mlxd_rank_heartbeat_age_seconds", "gauge", "seconds since a rank's last heartbeat"
    )
    out.extend(
        f'mlxd_rank_heartbeat_age_seconds{{rank="{r.rank}"}} {r.heartbeat_age:.3f}'
        for r in cluster.ranks
        if r.heartbeat_age is not None
    )
    _header(
        out,
        "mlxd_lockstep_broadcast_seconds",
        "summary",
        "rank 0's broadcasts of each step's decisions to the other ranks: the collectives "
        "only, after rank 0's queued work is done (includes waiting for the slowest rank)",
    )
    out.append(f"mlxd_lockstep_broadcast_seconds_sum {cluster.broadcast_seconds:.6f}")
    out.append(f"mlxd_lockstep_broadcast_seconds_count {cluster.broadcasts}")


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _header(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
