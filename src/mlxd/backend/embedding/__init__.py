"""Embedding models: encoder (BERT family, through mlx-embeddings) and decoder (a causal body
through mlx-lm) checkpoints, pooled and normalized as the checkpoint says."""

from mlxd.backend.embedding.embedder import MlxEmbedder, load_embedding

__all__ = ["MlxEmbedder", "load_embedding"]
