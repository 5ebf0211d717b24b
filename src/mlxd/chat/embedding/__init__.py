"""Embedding requests from any front door: inputs (texts or token ids) to the engine's
token-id rows, and its vectors back, cut to the dimensions asked for."""

from mlxd.chat.embedding.embed_session import (
    Embeddings,
    EmbedInput,
    PendingEmbeddings,
    cut_vector,
    start_embedding,
)

__all__ = ["EmbedInput", "Embeddings", "PendingEmbeddings", "cut_vector", "start_embedding"]
