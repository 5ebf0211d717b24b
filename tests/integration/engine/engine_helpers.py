"""Helpers shared by the engine integration tests."""

from __future__ import annotations

import random
from typing import Any

from mlxd.engine import EngineRequest, ModelInfo, RequestHandle
from mlxd.types import FinishEvent, SamplingParams, TokenEvent


def random_prompts(n: int, vocab: int, lengths: tuple[int, int], seed: int = 0) -> list[list[int]]:
    """n prompts of ordinary token ids (no special tokens), mixed lengths."""
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(rng.randrange(*lengths))] for _ in range(n)]


def request(info: ModelInfo, prompt: list[int], **params: Any) -> EngineRequest:
    return EngineRequest(info.name, prompt, SamplingParams(**params))


def collect_events(handle: RequestHandle) -> tuple[list[TokenEvent], FinishEvent]:
    tokens: list[TokenEvent] = []
    for event in handle:
        if isinstance(event, TokenEvent):
            tokens.append(event)
        else:
            return tokens, event
    raise AssertionError("no FinishEvent")
