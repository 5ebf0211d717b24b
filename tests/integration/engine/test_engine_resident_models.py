"""Resident models on real MLX: max_models (LRU), idle TTL, pins, prefix-cache entries and
memory given back, and no stream cut by an unload."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from mlxd.backend.prefix.cache import ENTRY_BYTES, KEY_TOKEN_BYTES, PrefixCache, SnapshotKind
from mlxd.backend.prefix.prompt_trie import NODE_BYTES
from mlxd.engine import Engine, ModelInfo
from mlxd.errors import ModelNotFound
from mlxd.types import FinishReason, TokenEvent
from tests.checkpoints import make_checkpoint
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.engine_helpers import collect_events, request

DEADLINE_S = 60.0  # generous: only a hang fails it
PROMPT = [11, 12, 13, 14, 15]


@pytest.fixture(scope="module")
def three_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Three distinct tiny chat checkpoints (different weights): A, B and C."""
    root = tmp_path_factory.mktemp("resident")
    a, b, c = (make_checkpoint(root / name, "chat", seed=i + 1) for i, name in enumerate("abc"))
    return a, b, c


def wait_until(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def loaded(engine: Engine) -> tuple[str, ...]:
    return engine.stats().models_loaded


def greedy(engine: Engine, info: ModelInfo, n: int = 16) -> list[int]:
    tokens, fin = engine.submit(request(info, PROMPT, max_tokens=n, ignore_eos=True)).collect()
    assert fin.reason is FinishReason.LENGTH
    return tokens


def test_a_third_model_unloads_the_least_recently_used(
    make_engine: EngineFactory, three_models: tuple[Path, Path, Path]
) -> None:
    a, b, c = three_models
    engine = make_engine(max_models=2)
    info_a = engine.load_model(a)
    before = greedy(engine, info_a)  # leaves a prefix-cache entry for A
    assert engine.stats().cache.entries == 1
    engine.load_model(b)
    two_models = mx.get_active_memory()
    engine.load_model(c)
    assert loaded(engine) == ("b", "c")
    assert engine.stats().cache.entries == 0  # A's entry went with it
    # A's weights were given back: a third resident model would add a whole model's bytes
    weight_bytes = (a / "model.safetensors").stat().st_size
    assert mx.get_active_memory() - two_models < weight_bytes // 2
    with pytest.raises(ModelNotFound):
        engine.submit(request(info_a, PROMPT, max_tokens=2))
    again = engine.load_model(a)  # B, least recently used now, makes room
    assert loaded(engine) == ("c", "a")
    assert greedy(engine, again) == before  # same weights, same greedy answer


def test_a_streaming_model_unloads_only_after_its_stream(
    make_engine: EngineFactory, three_models: tuple[Path, Path, Path]
) -> None:
    a, b, c = three_models
    reference = make_engine()
    expected = greedy(reference, reference.load_model(a), n=300)

    slow = threading.Event()  # until set, each sampled token waits 5 ms: A outlives the loads
    slow.set()

    def hook(site: str, request_id: str | None) -> None:
        if site == "sample" and slow.is_set():
            time.sleep(0.005)

    engine = make_engine(max_models=2, fault_hook=hook)
    info_a = engine.load_model(a)
    handle = engine.submit(request(info_a, PROMPT, max_tokens=300, ignore_eos=True))
    events = iter(handle)
    first = next(events)  # A is streaming
    assert isinstance(first, TokenEvent)
    engine.load_model(b)
    engine.load_model(c)
    assert engine.stats().running == 1 and loaded(engine) == ("a", "b", "c")
    slow.clear()
    rest, fin = collect_events(handle)
    tokens = list(first.token_ids) + [t for e in rest for t in e.token_ids]
    assert fin.reason is FinishReason.LENGTH
    assert tokens == expected  # every token, none lost to the loads
    assert wait_until(lambda: loaded(engine) == ("b", "c"))


def test_ttl_unloads_an_idle_model_but_not_a_pinned_one(
    make_engine: EngineFactory, three_models: tuple[Path, Path, Path]
) -> None:
    a, b, _ = three_models
    engine = make_engine(model_ttl_seconds=0.3)
    info_a = engine.load_model(a, pin=True)
    info_b = engine.load_model(b)
    greedy(engine, info_b, n=4)
    assert wait_until(lambda: loaded(engine) == ("a",))
    # A was idle longer than B: only its pin kept it
    assert greedy(engine, info_a, n=4) and engine.health().ok


def test_prefix_cache_drop_forgets_one_model_only() -> None:
    def kv(tokens: int) -> list[KVCache]:
        cache = KVCache()
        cache.update_and_fetch(mx.zeros((1, 2, tokens, 8)), mx.zeros((1, 2, tokens, 8)))
        return [cache]

    pc = PrefixCache(1 << 20)
    prompt, other = list(range(100, 140)), list(range(200, 230))
    pc.store("a", prompt, kv(40), SnapshotKind.ANSWER, None)
    pc.store("a", other, kv(30), SnapshotKind.ANSWER, None)
    pc.store("b", prompt, kv(40), SnapshotKind.ANSWER, None)
    b_bytes = kv(40)[0].nbytes
    assert pc.drop("a") == 2
    assert (len(pc), pc.stats().kv_bytes) == (1, b_bytes)
    assert pc.nbytes == b_bytes + ENTRY_BYTES + len(prompt) * (KEY_TOKEN_BYTES + NODE_BYTES)
    assert pc.fetch("a", [*prompt, 5]).cache is None
    reuse = pc.fetch("b", [*prompt, 5])
    assert reuse.cache is not None and reuse.tokens == len(prompt)
    assert pc.drop("missing") == 0 and len(pc) == 1


def test_server_models_reserve_and_load_again(
    make_engine: EngineFactory, three_models: tuple[Path, Path, Path], isolated_home: Path
) -> None:
    """The server's ServedModels never hands out a model the engine unloaded, and the model
    it hands out stays loaded until the request is submitted, even if another loads first."""
    import asyncio
    import shutil

    from mlxd.server.served_models import ServedModels

    store = isolated_home / "mlxd" / "models"
    for path in three_models[:2]:
        shutil.copytree(path, store / path.name)
    engine = make_engine(max_models=1)
    models = ServedModels(engine, default=None)

    async def scenario() -> None:
        a = await models.get("a")
        await models.get("b")  # a request for b loads it while a's request is on its way
        assert loaded(engine) == ("a", "b")
        greedy(engine, a, n=4)  # a's submit succeeds; a goes once idle
        assert wait_until(lambda: loaded(engine) == ("b",))
        again = await models.get("a")  # loaded again (b, still reserved, goes later)
        assert again is not a and again.name == "a" and "a" in loaded(engine)
        assert len(greedy(engine, again, n=4)) == 4

    asyncio.run(scenario())
