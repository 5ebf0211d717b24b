"""Serving one model across the ranks of an `mlx.launch` job: the lockstep backend, its channel,
rank liveness and the launch environment."""
