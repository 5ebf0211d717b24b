"""TokenLogprob values -> OpenAI's two logprobs shapes (chat and legacy completions)."""

from __future__ import annotations

import math
from typing import Any, TypedDict

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


class CompletionLogprobs(TypedDict):
    """The legacy completions shape: parallel lists, one entry per token."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


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
) -> CompletionLogprobs:
    """Legacy shape: parallel lists; offset is the text length before these tokens."""
    tokens: list[str] = []
    lps: list[float] = []
    tops: list[dict[str, float]] = []
    offsets: list[int] = []
    for item in items:
        token = texts(item.token_id)
        tokens.append(token)
        lps.append(_finite(item.logprob))
        tops.append({texts(t): _finite(lp) for t, lp in item.top})
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def merge_completion_logprobs(parts: list[CompletionLogprobs]) -> CompletionLogprobs | None:
    if not parts:
        return None
    merged = CompletionLogprobs(tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[])
    for part in parts:
        merged["tokens"] += part["tokens"]
        merged["token_logprobs"] += part["token_logprobs"]
        merged["top_logprobs"] += part["top_logprobs"]
        merged["text_offset"] += part["text_offset"]
    return merged
