"""The only package that imports mlx / mlx_lm: loading, the batched step, sampling, caches."""

from mlxd.backend import blas, lazy_transformers

blas.active()  # before any mlx import: the fast BLAS must be loaded first
lazy_transformers.defer()  # mlx_lm then imports without transformers
