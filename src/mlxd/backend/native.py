"""What a process does before its first import of mlx or mlx_lm: load the fast BLAS (it must be
in the process before mlx.core is) and install the hook that keeps transformers out of mlx_lm's
import. Whatever builds something that runs mlx calls `prepare_mlx()` first."""

from __future__ import annotations

from mlxd.backend import blas
from mlxd.backend.tokenizer import lazy_transformers


def prepare_mlx() -> blas.BlasInfo:
    """Load MKL (when wanted and present) and defer transformers; idempotent. Returns the BLAS
    mlx's CPU matmuls use."""
    info = blas.active()
    lazy_transformers.defer()
    return info
