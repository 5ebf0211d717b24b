"""The prefix cache's budget counts what it really holds: filled with many conversations on
tiny models (where the index weighs as much as the KV: 300 bytes a token beside 512), the
bytes it counts match the memory it holds, measured as MLX's active memory plus the Python
heap it grew, within TOLERANCE. Counting the KV arrays alone (the old budget) fell short by
~40% on tiny-chat (the resident memory the cache caused was 1.7x that count there, 1.03x the
new one)."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path

import mlx.core as mx
import pytest

from mlxd.chat.session import start_chat
from mlxd.engine import Engine, ModelInfo
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory

TOLERANCE = 0.10
WORDS = ["hello", "world", "weather", "paris", "quick", "fox", "7", "42"]


def converse(engine: Engine, info: ModelInfo, i: int, rng: random.Random) -> None:
    text = " ".join(rng.choice(WORDS) for _ in range(200))
    messages = [
        {"role": "system", "content": f"System {i}: be brief."},
        {"role": "user", "content": text},
    ]
    for _ in start_chat(engine, info, chat_request(messages, {"max_tokens": 8, "temperature": 0})):
        pass


@pytest.mark.parametrize("kind", ["chat", "hybrid"])
def test_the_counted_bytes_match_the_memory_held(
    kind: str, make_engine: EngineFactory, request: pytest.FixtureRequest
) -> None:
    model: Path = request.getfixturevalue(f"tiny_{kind}_model")
    engine = make_engine(prefix_cache_bytes=1 << 30)  # no eviction
    info = engine.load_model(model)
    rng = random.Random(0)
    converse(engine, info, -1, rng)  # the first request's one-time allocations
    gc.collect()
    before = engine.stats()
    tracemalloc.start()
    try:
        active, heap = mx.get_active_memory(), tracemalloc.get_traced_memory()[0]
        for i in range(30):
            converse(engine, info, i, rng)
        gc.collect()
        held = mx.get_active_memory() - active + tracemalloc.get_traced_memory()[0] - heap
    finally:
        tracemalloc.stop()
    after = engine.stats()
    counted = after.cache.bytes - before.cache.bytes
    assert after.cache.entries - before.cache.entries >= 30
    assert abs(counted - held) <= TOLERANCE * held, (counted, held)
    kv = after.cache.kv_bytes - before.cache.kv_bytes
    assert 0 < kv < counted  # the KV arrays are part of it, reported apart
