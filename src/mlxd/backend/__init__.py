"""The only package that imports mlx (and mlx_lm, but for the chat layer's tool-call parsers):
loading, the batched step, sampling, caches. The map: docs/ARCHITECTURE.md."""

from mlxd.backend import blas
from mlxd.backend.tokenizer import lazy_transformers

blas.active()  # before any mlx import: the fast BLAS must be loaded first
lazy_transformers.defer()  # mlx_lm then imports without transformers
