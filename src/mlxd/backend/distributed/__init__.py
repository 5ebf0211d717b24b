"""Serving one model across the ranks of an `mlx.launch` job: the lockstep backend, its channel,
rank liveness and the launch environment, behind the `job` facade."""

from mlxd.backend.distributed.job import Leader, follow_leader, launched_role, lead

__all__ = ["Leader", "follow_leader", "launched_role", "lead"]
