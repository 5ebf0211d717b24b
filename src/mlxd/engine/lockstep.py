"""Which part of an `mlx.launch` job this process plays (backend.distributed does the work).

Outside mlx.launch, or in a one-rank job, nothing changes: `cluster_role` returns None and
the engine builds its usual backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxd.engine.engine import backend_options
from mlxd.engine.engine_config import EngineConfig

if TYPE_CHECKING:
    from mlxd.backend.distributed.cluster import DistributedBackend, ShardMode


@dataclass(frozen=True, slots=True)
class ClusterRole:
    rank: int
    size: int
    mode: ShardMode

    @property
    def leader(self) -> bool:
        return self.rank == 0


def cluster_role(mode: str) -> ClusterRole | None:
    """This process's rank when it runs under mlx.launch with more than one rank."""
    from mlxd.backend.distributed import launch_env
    from mlxd.backend.distributed.cluster import ShardMode

    if not launch_env.launched():
        return None
    group = launch_env.init_group()
    if group.size() < 2:
        return None
    launch_env.quiet_launcher_stdin()
    launch_env.leave_with_launcher()
    return ClusterRole(group.rank(), group.size(), ShardMode(mode))


def leader_backend(cfg: EngineConfig, role: ClusterRole) -> DistributedBackend:
    """Rank 0's backend: the engine built on it drives every rank."""
    from mlxd.backend.distributed.cluster import DistributedBackend
    from mlxd.backend.distributed.launch_env import init_group

    # Each rank holds its shard of every cache: no disk tier (one directory, many shards).
    options = backend_options(cfg) | {"prefix_cache_dir": ""}
    return DistributedBackend(init_group(), role.mode, **options)


def follow_leader(cfg: EngineConfig, role: ClusterRole) -> int:
    """Ranks 1..N-1: run rank 0's steps until it stops; returns the exit code."""
    from mlxd.backend.distributed.cluster import follow
    from mlxd.backend.distributed.launch_env import init_group
    from mlxd.backend.mlx_backend import MlxBackend

    options = backend_options(cfg) | {"prefill_group_tokens": 0, "prefix_cache_dir": ""}
    follow(init_group(), MlxBackend(**options), role.mode)
    return 0
