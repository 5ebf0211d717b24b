"""Which part of an `mlx.launch` job this process plays (backend.distributed does the work).

Outside mlx.launch, or in a one-rank job, nothing changes: `cluster_role` returns None and
the engine builds its usual backend.
"""

from __future__ import annotations

from mlxd.backend import factory
from mlxd.backend.api import ClusterLeader, ClusterRole
from mlxd.engine.engine_config import EngineConfig


def cluster_role(mode: str) -> ClusterRole | None:
    """This process's rank when it runs under mlx.launch with more than one rank (`mode`:
    how the job splits each model, "tensor", "pipeline" or "auto")."""
    return factory.cluster_role(mode)


def leader_backend(cfg: EngineConfig, role: ClusterRole) -> ClusterLeader:
    """Rank 0's side of the job: the engine built on its `backend` drives every rank."""
    return factory.cluster_leader(cfg.backend, role)


def follow_leader(cfg: EngineConfig, role: ClusterRole) -> int:
    """Ranks 1..N-1: run rank 0's steps until it stops; returns the exit code."""
    return factory.follow_leader(cfg.backend, role)
