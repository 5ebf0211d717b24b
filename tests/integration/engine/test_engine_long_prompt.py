"""A long prompt arriving while rows decode is prefilled in chunks between their decode
steps (issue 30): every step still gives each decoding row its next token. Progress and
ordering only, never wall time."""

from __future__ import annotations

import time
from pathlib import Path

from mlxd.engine import RequestHandle, RequestStatus

from .conftest import EngineFactory
from .engine_helpers import random_prompts, request


def test_decoding_rows_keep_streaming_while_a_long_prompt_prefills(
    make_engine: EngineFactory, tiny_chat_model: Path
) -> None:
    rows: list[RequestHandle] = []
    long: list[RequestHandle] = []
    steps: list[tuple[RequestStatus, list[int]]] = []

    def hook(site: str, request_id: str | None) -> None:
        # Engine thread, at each step boundary: the long prompt's state, the rows' counts.
        if site == "step" and long:
            counts = [h._request.completion_tokens for h in rows]
            steps.append((long[0].status, counts))

    engine = make_engine(max_batch=8, prefill_chunk=64, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    for prompt in random_prompts(4, info.vocab_size, (5, 20), seed=6):
        rows.append(engine.submit(request(info, prompt, max_tokens=600, ignore_eos=True)))
    while not all(h.status is RequestStatus.DECODING for h in rows):
        time.sleep(0.005)
    prompt = random_prompts(1, info.vocab_size, (1500, 1501), seed=7)[0]
    long.append(engine.submit(request(info, prompt, max_tokens=8, ignore_eos=True)))
    tokens, finish = long[0].collect()
    for h in rows:
        h.cancel()
    assert len(tokens) == 8 and finish.usage.prompt_tokens == 1500
    prefilling = [counts for status, counts in steps if status is RequestStatus.PREFILLING]
    assert len(prefilling) >= 1500 // 64  # chunks, one per step, at most 64 tokens each
    for before, after in zip(prefilling, prefilling[1:], strict=False):
        assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
