"""The only package that imports mlx (and mlx_lm, but for the chat layer's tool-call parsers):
loading, the batched step, sampling, caches. The engine sees `api` (the contract) and `factory`
(which builds a backend); the map: docs/ARCHITECTURE.md. Importing it loads nothing native
(`native.prepare_mlx` does, when a backend is built)."""
