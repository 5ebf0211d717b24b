"""Wire shapes of `POST /v1/embeddings` (OpenAI's): the request, and the body of its answer.

`input` is a string, a list of strings, a list of token ids or a list of token-id lists; its
count and each row's length are bounded by the engine (MLXD_EMBED_MAX_INPUTS, the model's
window). `encoding_format` base64 is each vector's little-endian float32 bytes, as the openai
SDK decodes them.
"""

from __future__ import annotations

import base64
import struct
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr

from mlxd.chat.embedding import Embeddings, EmbedInput
from mlxd.server.fields import ModelName, WireModel

TokenId = Annotated[StrictInt, Field(ge=0)]
Dimensions = Annotated[StrictInt, Field(ge=1, le=1 << 16)]
EmbeddingInput = StrictStr | list[StrictStr] | list[TokenId] | list[list[TokenId]]


class EmbeddingsRequest(WireModel):
    model: ModelName | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Dimensions | None = None
    user: StrictStr | None = None  # accepted, unused (OpenAI's abuse monitoring)

    def embed_input(self) -> EmbedInput:
        items = self.input
        if isinstance(items, str):
            return EmbedInput([items], self.dimensions)
        if items and all(isinstance(i, int) for i in items):
            return EmbedInput([[i for i in items if isinstance(i, int)]], self.dimensions)
        return EmbedInput(items, self.dimensions)  # type: ignore[arg-type]


def embeddings_body(model: str, result: Embeddings, encoding: str) -> dict[str, Any]:
    """OpenAI's list of embedding objects, with usage."""
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, encoding)}
        for i, vector in enumerate(result.vectors)
    ]
    tokens = result.prompt_tokens
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
