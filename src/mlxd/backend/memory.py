"""Giving memory back after a model is unloaded (the engine layer never imports mlx)."""

from __future__ import annotations

import gc

import mlx.core as mx


def free_unused() -> None:
    """Collect garbage, then return MLX's cached (now unused) buffers to the system.

    Model trees hold reference cycles, so without the collection an unloaded model's weights
    would stay alive, and out of reach of `clear_cache`, until the next automatic gc pass."""
    gc.collect()
    mx.clear_cache()
