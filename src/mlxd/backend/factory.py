"""Builds the backend an engine runs on: the MLX backend of one process, or rank 0's side of an
`mlx.launch` job; and runs a follower rank. Importing this module loads nothing: mlx, MKL and
the import hook arrive when a backend is built (backend.native)."""

from __future__ import annotations

from mlxd.backend.api import Backend, BackendConfig, ClusterLeader, ClusterRole
from mlxd.backend.native import prepare_mlx


def mlx_backend(config: BackendConfig) -> Backend:
    """The backend of a one-process engine."""
    prepare_mlx()
    from mlxd.backend.mlx_backend import MlxBackend

    return MlxBackend(config)


def cluster_role(mode: str) -> ClusterRole | None:
    """This process's part when it runs under mlx.launch with more than one rank, else None
    (`mode`: a ShardMode value, how the job splits each model)."""
    prepare_mlx()
    from mlxd.backend.distributed import launched_role

    return launched_role(mode)


def cluster_leader(config: BackendConfig, role: ClusterRole) -> ClusterLeader:
    """Rank 0: the backend its engine runs on drives every rank."""
    prepare_mlx()
    from mlxd.backend.distributed import lead

    return lead(config, role)


def follow_leader(config: BackendConfig, role: ClusterRole) -> int:
    """Ranks 1..N-1: run rank 0's steps until it stops; returns the exit code."""
    prepare_mlx()
    from mlxd.backend.distributed import follow_leader as follow

    return follow(config, role)
