"""The only package that imports mlx / mlx_lm: loading, the batched step, sampling, caches."""
