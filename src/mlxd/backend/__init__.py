"""The only package that imports mlx / mlx_lm: loading, the batched step, sampling, caches."""

from mlxd.backend import blas

blas.active()  # before any mlx import: the fast BLAS must be loaded first
