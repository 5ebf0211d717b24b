"""TokenLogprob values -> OpenAI's two logprobs shapes (chat and legacy completions)."""

from __future__ import annotations

import math
from typing import Any

from mlxd.types import Tokenizer, TokenLogprob


class TokenTexts:
    """Token id -> its text, decoded once per id (the tokenizer is the model's)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id])
            self._cache[token_id] = text
        return text


def _finite(lp: float) -> float:
    # JSON has no -inf; a masked token's logprob is reported as the most negative float.
    return lp if math.isfinite(lp) else -9999.0


def chat_logprobs(items: tuple[TokenLogprob, ...], texts: TokenTexts) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` entries."""
    out = []
    for item in items:
        token = texts(item.token_id)
        out.append(
            {
                "token": token,
                "logprob": _finite(item.logprob),
                "bytes": list(token.encode()),
                "top_logprobs": [
                    {"token": texts(t), "logprob": _finite(lp), "bytes": list(texts(t).encode())}
                    for t, lp in item.top
                ],
            }
        )
    return out


def completion_logprobs(
    items: tuple[TokenLogprob, ...], texts: TokenTexts, offset: int
) -> dict[str, list[Any]]:
    """Legacy shape: parallel lists; offset is the text length before these tokens."""
    tokens, lps, tops, offsets = [], [], [], []
    for item in items:
        token = texts(item.token_id)
        tokens.append(token)
        lps.append(_finite(item.logprob))
        tops.append({texts(t): _finite(lp) for t, lp in item.top})
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def merge_completion_logprobs(parts: list[dict[str, list[Any]]]) -> dict[str, list[Any]] | None:
    if not parts:
        return None
    merged: dict[str, list[Any]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    for part in parts:
        for key, values in part.items():
            merged[key].extend(values)
    return merged
