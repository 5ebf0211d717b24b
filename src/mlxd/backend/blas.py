"""Which BLAS mlx's CPU matmuls use: Intel MKL when its wheel is installed, else mlx's own.

The `mlx[cpu]` wheel on Linux links a bundled single-threaded reference BLAS (a few GFLOP/s).
Loading MKL's runtime library with RTLD_GLOBAL *before* `mlx.core` is first imported makes
mlx's `cblas_sgemm` calls resolve to MKL (10-20x faster on x86_64). No mlx import here: this
module must run first: backend.native calls it before anything imports mlx.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from mlxd.config import setting, setting_int
from mlxd.errors import one_line


@dataclass(frozen=True, slots=True)
class BlasInfo:
    name: str  # "mkl" or "reference"
    detail: str  # the library path and threading, or why the fast BLAS is off


_active: BlasInfo | None = None


def active() -> BlasInfo:
    """The BLAS this process uses (loads MKL on first call, when wanted and present)."""
    global _active
    if _active is None:
        _active = _choose()
    return _active


def _choose() -> BlasInfo:
    wanted = setting("blas").strip().lower()
    if wanted == "reference":
        return BlasInfo("reference", "MLXD_BLAS=reference")
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return BlasInfo("reference", "mlx's own (MKL is used on Linux x86_64 only)")
    if "mlx.core" in sys.modules:
        return BlasInfo("reference", "mlx was imported before MKL could be loaded")
    lib = _find_mkl()
    if lib is None:
        return BlasInfo("reference", "MKL not installed (pip install mkl)")
    threads = setting_int("blas_threads")
    # One thread leaves the other cores to the engine, tokenizer and HTTP threads (measured:
    # sequential MKL beats its threaded layers when the cores are busy; see docs/usage/blas.md).
    os.environ.setdefault("MKL_THREADING_LAYER", "SEQUENTIAL" if threads <= 1 else "INTEL")
    if threads > 1:
        os.environ.setdefault("MKL_NUM_THREADS", str(threads))
    try:
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return BlasInfo("reference", f"MKL failed to load: {one_line(exc, with_type=False)}")
    layer = os.environ["MKL_THREADING_LAYER"].lower()
    return BlasInfo("mkl", f"{lib} ({layer}, {max(threads, 1)} thread(s))")


def _find_mkl() -> Path | None:
    """libmkl_rt from the `mkl` wheel: installed under the environment's lib/ directory."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        candidate = Path(prefix) / "lib" / "libmkl_rt.so.3"
        if candidate.is_file():
            return candidate
    return None
