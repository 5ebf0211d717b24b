"""MlxEmbedder: batches of token-id rows to vectors; load_embedding builds one from a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.backend.embedding.bodies import Body, decoder_body, encoder_body
from mlxd.checkpoint import EmbeddingSpec, embedding_dimensions
from mlxd.errors import ModelBroken, one_line

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module
    from mlx_lm.tokenizer_utils import TokenizerWrapper


class MlxEmbedder:
    """One embedding model's forward pass over a padded batch, pooled and normalized as
    its `spec` says. Engine thread only."""

    def __init__(self, body: Body, spec: EmbeddingSpec, pad_id: int, dimensions: int) -> None:
        self.body = body
        self.spec = spec
        self.pad_id = pad_id
        self.dimensions = dimensions

    def embed(self, rows: list[list[int]]) -> list[list[float]]:
        """One float32 vector per row (each row non-empty, within the model's window)."""
        import mlx.core as mx

        from mlxd.backend.embedding.pooling import normalized, pool

        lengths = [len(r) for r in rows]
        width = max(lengths)
        ids = mx.array([r + [self.pad_id] * (width - len(r)) for r in rows], dtype=mx.int32)
        mask = mx.array([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=mx.float32)
        hidden = self.body(ids, mask).astype(mx.float32)
        vectors = pool(hidden, mask, lengths, self.spec.pooling) if hidden.ndim == 3 else hidden
        if self.spec.normalize:
            vectors = normalized(vectors)
        out: list[list[float]] = vectors.tolist()  # type: ignore[assignment]
        return out


def load_embedding(
    path: Path, config: dict[str, Any], spec: EmbeddingSpec, *, trust_remote_code: bool
) -> tuple[Module, TokenizerWrapper, MlxEmbedder]:
    """The model, tokenizer and embedder of the embedding checkpoint at `path`; any failure
    is a one-line ModelBroken."""
    from mlxd.backend.mlx_lm.compat import load_tokenizer
    from mlxd.backend.mlx_lm.flat_body import load_embedding_body

    try:
        if spec.encoder:
            model, body = encoder_body(path, config)
            tokenizer = load_tokenizer(path, None, trust_remote_code=trust_remote_code)
        else:
            model, tokenizer = load_embedding_body(path, trust_remote_code=trust_remote_code)
            body = decoder_body(model, path.name)
    except ModelBroken:
        raise
    except Exception as exc:  # any loader failure is a broken model, said in one line
        raise ModelBroken(f"cannot load {path.name}: {one_line(exc)}") from exc
    pad = config.get("pad_token_id")
    pad_id = pad if isinstance(pad, int) else (tokenizer.pad_token_id or 0)
    return model, tokenizer, MlxEmbedder(body, spec, pad_id, embedding_dimensions(config))
