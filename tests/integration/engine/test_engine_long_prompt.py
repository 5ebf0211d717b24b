"""A long prompt arriving while rows decode is prefilled in chunks between their decode
steps (issue 30): every step still gives each decoding row its next token, up to a 16k-token
prompt on a 32k window, whose bounds stay exact. Progress and ordering only, never wall time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mlxd.engine import RequestHandle, RequestStatus
from mlxd.errors import ContextOverflow
from mlxd.types import FinishReason, TokenEvent
from tests.checkpoints import make_checkpoint

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


WINDOW = 32768  # the long-prompt checkpoint's context window
LONG = 16384  # the long prompt: half the window


@pytest.fixture(scope="module")
def long_window_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer llama with a 32k window: a 16k prompt prefills in a fraction of a second."""
    path = tmp_path_factory.mktemp("checkpoints") / "long-window"
    return make_checkpoint(path, "chat", size="long", window=WINDOW)


def _stream(handle: RequestHandle, arrivals: list[float]) -> None:
    """Consumer thread: the monotonic time each token event reaches the stream."""
    for event in handle:
        if isinstance(event, TokenEvent):
            arrivals.append(time.monotonic())


def test_a_16k_prompt_is_prefilled_between_the_steps_of_4_streams(
    make_engine: EngineFactory, long_window_model: Path
) -> None:
    rows: list[RequestHandle] = []
    long: list[RequestHandle] = []
    steps: list[tuple[RequestStatus, list[int]]] = []

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and long:  # engine thread, at each step boundary
            steps.append((long[0].status, [h._request.completion_tokens for h in rows]))

    engine = make_engine(max_batch=8, prefill_chunk=512, fault_hook=hook)
    info = engine.load_model(long_window_model)
    assert info.context_window == WINDOW
    arrivals: list[list[float]] = [[] for _ in range(4)]
    for prompt in random_prompts(4, info.vocab_size, (5, 20), seed=8):
        rows.append(engine.submit(request(info, prompt, max_tokens=8000, ignore_eos=True)))
    consumers = [
        threading.Thread(target=_stream, args=(h, out), daemon=True)
        for h, out in zip(rows, arrivals, strict=True)
    ]
    for thread in consumers:
        thread.start()
    while not all(len(out) >= 2 for out in arrivals):
        time.sleep(0.005)
    prompt = random_prompts(1, info.vocab_size, (LONG, LONG + 1), seed=9)[0]
    long.append(engine.submit(request(info, prompt, max_tokens=8, ignore_eos=True)))
    tokens, finish = long[0].collect()
    for h in rows:
        h.cancel()
    for thread in consumers:
        thread.join(timeout=30)
    assert len(tokens) == 8 and finish.usage.prompt_tokens == LONG
    # Engine side: at most 512 prompt tokens per step, and every step of the prefill gives
    # each row its next token.
    prefilling = [counts for status, counts in steps if status is RequestStatus.PREFILLING]
    assert len(prefilling) >= LONG // 512
    for before, after in zip(prefilling, prefilling[1:], strict=False):
        assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
    # Stream side: each row's tokens reached its consumer after the long request was admitted
    # and before its first token.
    admitted, first = long[0]._request.admitted_at, long[0]._request.first_token_at
    assert admitted is not None and first is not None
    for out in arrivals:
        assert any(admitted < t < first for t in out), (admitted, first, out[-5:])


def test_the_window_bounds_a_long_prompt_exactly(
    make_engine: EngineFactory, long_window_model: Path
) -> None:
    """Prompt + answer never exceeds the window: max_tokens is cut to the room the prompt
    leaves (window - prompt), to the token; a prompt that fills the window is refused with
    its numbers."""
    engine = make_engine(max_batch=8, prefill_chunk=2048)
    info = engine.load_model(long_window_model)
    most = 8
    served = {}
    for length in (WINDOW - most, WINDOW - most + 1, WINDOW - 1):
        prompt = random_prompts(1, info.vocab_size, (length, length + 1), seed=length)[0]
        tokens, finish = engine.submit(
            request(info, prompt, max_tokens=most, ignore_eos=True)
        ).collect()
        assert finish.reason is FinishReason.LENGTH
        assert finish.usage.prompt_tokens == length
        served[length] = len(tokens)
    assert served == {WINDOW - most: most, WINDOW - most + 1: most - 1, WINDOW - 1: 1}
    full = random_prompts(1, info.vocab_size, (WINDOW, WINDOW + 1), seed=10)[0]
    with pytest.raises(ContextOverflow) as refused:
        engine.submit(request(info, full, max_tokens=most))
    assert (refused.value.prompt_tokens, refused.value.window) == (WINDOW, WINDOW)
    assert f"prompt has {WINDOW} tokens but the context window is {WINDOW}" in str(refused.value)
