"""start_embedding: the one path from an embeddings request (server or CLI) to the engine.

Texts are tokenized with the model's tokenizer and its own special tokens (BERT's [CLS] ...
[SEP]; Qwen3-Embedding's tokenizer appends the <|endoftext|> its last-token pooling reads);
token-id inputs go as given. `dimensions` keeps the first dimensions of each vector
(Matryoshka-trained models, e.g. Qwen3-Embedding, nomic) and rescales them to unit length
when the model normalizes; nomic-bert first layer-norms the full vector, as its model card's
recipe does (then always to unit length).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxd.engine import EmbedRequest
from mlxd.engine.embedding import check_count
from mlxd.errors import InvalidRequest
from mlxd.types import ModelKind

if TYPE_CHECKING:
    from mlxd.checkpoint import EmbeddingSpec
    from mlxd.engine import EmbedHandle, EmbedResult, Engine, ModelInfo


@dataclass(frozen=True, slots=True)
class EmbedInput:
    """One request's inputs (texts, or token-id lists), the vector length asked for (None:
    the model's), and whether rows longer than the model's window are cut to it."""

    inputs: list[str] | list[list[int]]
    dimensions: int | None = None
    truncate: bool = False


@dataclass(frozen=True, slots=True)
class Embeddings:
    """One vector per input, in order; the input tokens embedded."""

    vectors: list[list[float]]
    prompt_tokens: int


class PendingEmbeddings:
    """A started request: wait for it (sync or async), or cancel it."""

    def __init__(self, handle: EmbedHandle, info: ModelInfo, dimensions: int | None) -> None:
        self._handle = handle
        self._info = info
        self._dimensions = dimensions

    def result(self, timeout: float | None = None) -> Embeddings:
        return self._shaped(self._handle.result(timeout))

    async def wait(self) -> Embeddings:
        return self._shaped(await self._handle.wait())

    def cancel(self) -> None:
        self._handle.cancel()

    def _shaped(self, result: EmbedResult) -> Embeddings:
        dims = self._dimensions
        if dims is None or dims == self._info.dimensions:
            return Embeddings(result.vectors, result.prompt_tokens)
        spec = self._info.embedding
        vectors = [cut_vector(v, dims, spec) for v in result.vectors]
        return Embeddings(vectors, result.prompt_tokens)


def start_embedding(engine: Engine, info: ModelInfo, request: EmbedInput) -> PendingEmbeddings:
    """Tokenize and submit; raises InvalidRequest at once (wrong model kind, bad dimensions,
    empty texts, and what Engine.embed refuses)."""
    info.require(ModelKind.EMBEDDING)
    dims = request.dimensions
    if dims is not None and not 1 <= dims <= info.dimensions:
        raise InvalidRequest(
            f"dimensions must be between 1 and {info.dimensions} for {info.name}",
            param="dimensions",
        )
    check_count(len(request.inputs), engine.cfg.embed_max_inputs)  # before tokenizing them
    rows = token_rows(info, request.inputs)
    if request.truncate:
        rows = [row[: info.context_window] for row in rows]
    handle = engine.embed(EmbedRequest(info.name, rows))
    return PendingEmbeddings(handle, info, dims)


def token_rows(info: ModelInfo, inputs: list[str] | list[list[int]]) -> list[list[int]]:
    """Each input as token ids: texts through the model's tokenizer (an empty text is
    refused: it has no meaning to embed), token-id lists unchanged."""
    rows: list[list[int]] = []
    items: list[str | list[int]] = list(inputs)
    for index, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                where = f"input[{index}]" if len(inputs) > 1 else "input"
                raise InvalidRequest(f"{where} is an empty string", param="input")
            rows.append(info.tokenizer.encode(item))
        else:
            rows.append(list(item))
    return rows


def cut_vector(vector: list[float], dims: int, spec: EmbeddingSpec | None) -> list[float]:
    """The first `dims` components of `vector`, rescaled to unit length when the model
    normalizes; with `spec.layer_norm_cut`, of the layer-normed vector and always rescaled."""
    unit = spec is not None and spec.normalize
    if spec is not None and spec.layer_norm_cut:
        vector, unit = _layer_norm(vector), True
    head = vector[:dims]
    if not unit:
        return head
    norm = math.sqrt(sum(x * x for x in head)) or 1.0
    return [x / norm for x in head]


def _layer_norm(vector: list[float], eps: float = 1e-5) -> list[float]:
    """torch's F.layer_norm without weights (eps its default). Its scale is undone by the
    rescaling after the cut, so a vector normalized before it gives the same result."""
    mean = sum(vector) / len(vector)
    var = sum((x - mean) ** 2 for x in vector) / len(vector)
    scale = 1.0 / math.sqrt(var + eps)
    return [(x - mean) * scale for x in vector]
