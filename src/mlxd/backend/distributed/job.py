"""The distributed job as the rest of mlxd sees it: this process's role, rank 0's `Leader`
facade (the backend its engine runs on, rank liveness, a one-line description) and a follower
rank's loop. Everything else in this folder stays behind it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mlxd.backend.api import BackendConfig, ClusterRole, ShardMode
from mlxd.backend.distributed import launch_env
from mlxd.backend.distributed.cluster import DistributedBackend, follow
from mlxd.backend.mlx_backend import MlxBackend


def launched_role(mode: str) -> ClusterRole | None:
    """This process's rank when it runs under mlx.launch with more than one rank."""
    if not launch_env.launched():
        return None
    group = launch_env.init_group()
    if group.size() < 2:
        return None
    launch_env.quiet_launcher_stdin()
    launch_env.leave_with_launcher()
    return ClusterRole(group.rank(), group.size(), ShardMode(mode))


class Leader:
    """Rank 0's side of the job (api.ClusterLeader)."""

    def __init__(self, backend: DistributedBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> DistributedBackend:
        return self._backend

    def watch_ranks(self, on_fault: Callable[[str], None], stall_seconds: float) -> None:
        """Watch the other ranks; `on_fault` gets one line naming one that died or stalled."""
        self._backend.watch_ranks(on_fault, stall_seconds)

    def describe(self) -> str:
        return f"{self._backend.group.size()} ranks, {self._backend.layout.value}"

    @property
    def fault(self) -> str | None:
        return self._backend.fault


def lead(config: BackendConfig, role: ClusterRole) -> Leader:
    """Rank 0's backend. Each rank holds its shard of every cache: no disk tier (one
    directory, many shards)."""
    config = dataclasses.replace(config, prefix_cache_dir="")
    return Leader(DistributedBackend(launch_env.init_group(), role.mode, config))


def follow_leader(config: BackendConfig, role: ClusterRole) -> int:
    """Ranks 1..N-1: run rank 0's steps until it stops; returns the exit code. A follower's
    prefill groups are rank 0's (no planner of its own)."""
    config = dataclasses.replace(config, prefill_group_tokens=0, prefix_cache_dir="")
    follow(launch_env.init_group(), MlxBackend(config), role.mode)
    return 0
