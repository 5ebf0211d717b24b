"""Resident models over a fake backend: LRU past max_models, idle TTL, pins, busy models kept."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mlxd.backend.api import LoadedModel, StepResult
from mlxd.config import parse_duration
from mlxd.engine import Engine, EngineConfig, EngineRequest
from mlxd.engine.loaded_models import LoadedModels, ModelEntry
from mlxd.engine.residency import choose_unloads, next_check
from mlxd.errors import InvalidRequest, ModelNotFound
from mlxd.types import FinishReason, SamplingParams

from .fake_backend import FakeBackend, FakeRunner, fake_model

DEADLINE_S = 30.0  # generous: only a hang fails it


def wait_until(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@dataclass
class GatedRunner(FakeRunner):
    """Emits nothing while its gate is closed: its requests stay running as long as a test
    wants."""

    gate: threading.Event = field(default_factory=threading.Event)

    def step(self) -> StepResult:
        if not self.gate.is_set():
            time.sleep(0.001)  # the engine loop calls step() in a loop; do not spin
            return StepResult([])
        return super().step()


@dataclass
class ResidentBackend(FakeBackend):
    """FakeBackend that records unloads; runners of models in `gated` wait for `gate`."""

    gated: set[str] = field(default_factory=set)
    gate: threading.Event = field(default_factory=threading.Event)
    unloaded: list[str] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)

    def load(self, path: Path) -> LoadedModel:
        self.loads.append(path.name)
        return super().load(path)

    def make_runner(self, name: str, model: LoadedModel) -> FakeRunner:
        if name not in self.gated:
            return super().make_runner(name, model)
        runner = GatedRunner(name, gate=self.gate)
        self.runners.append(runner)
        return runner

    def unload(self, name: str) -> None:
        self.unloaded.append(name)


def make(backend: FakeBackend, **overrides: object) -> Engine:
    return Engine(EngineConfig.from_settings(max_batch=4, **overrides), backend=backend)


def req(model: str, prompt: list[int], **params: object) -> EngineRequest:
    return EngineRequest(model, prompt, SamplingParams(**params))  # type: ignore[arg-type]


def loaded(engine: Engine) -> tuple[str, ...]:
    return engine.stats().models_loaded


# ---- the residency choices ----------------------------------------------------------


def table_with(*names: str) -> LoadedModels:
    models = LoadedModels()
    for i, name in enumerate(names):
        models.put(ModelEntry.of(name, fake_model(Path(f"/m/{name}"))))
        entry = models.get(name)
        assert entry is not None
        entry.use.last_used = 100.0 + i  # load order = use order
    return models


def evictable(
    models: LoadedModels, busy: set[str], now: float, max_models: int, ttl: float, keep=None
) -> list[str]:
    return choose_unloads(models.usage(), busy, now, max_models=max_models, ttl=ttl, keep=keep)[0]


def test_lru_choice_takes_the_least_recently_used_idle_models() -> None:
    reg = table_with("a", "b", "c", "d")
    assert evictable(reg, set(), 200.0, max_models=2, ttl=0) == ["a", "b"]
    reg.touch("a")  # now the most recent
    assert evictable(reg, set(), 200.0, max_models=2, ttl=0) == ["b", "c"]
    assert evictable(reg, set(), 200.0, max_models=4, ttl=0) == []


def test_lru_choice_skips_busy_pinned_pending_and_kept_models() -> None:
    reg = table_with("a", "b", "c", "d")
    reg.pin("a")
    assert reg.acquire("b") is not None  # a submit in flight
    assert evictable(reg, {"c"}, 200.0, max_models=1, ttl=0, keep="d") == []
    reg.release("b")
    assert evictable(reg, {"c"}, 200.0, max_models=1, ttl=0, keep="d") == ["b"]
    assert not reg.remove_if_idle("c", {"c"}) and not reg.remove_if_idle("a", set())
    assert reg.remove_if_idle("b", set()) and reg.names() == ["a", "c", "d"]


def test_a_busy_choice_is_not_swapped_for_an_idle_model() -> None:
    reg = table_with("a", "b", "c")
    unload, doomed = choose_unloads(reg.usage(), {"a"}, 200.0, max_models=2, ttl=0, keep="c")
    assert (unload, doomed) == ([], {"a"})  # a: later
    reg.touch("a")  # its request finished: a is now the most recent, yet still first in line
    unload, doomed = choose_unloads(reg.usage(), set(), 200.0, max_models=2, ttl=0, doomed=doomed)
    assert (unload, doomed) == (["a"], set())
    reg.remove_if_idle("a", set())
    assert evictable(reg, set(), 200.0, max_models=2, ttl=0) == []


def test_ttl_choice_comes_first_and_counts_toward_the_limit() -> None:
    reg = table_with("a", "b", "c")
    # at t=104.5 with ttl 3: a (100) and b (101) expired; with max 2, c alone may stay
    assert evictable(reg, set(), 104.5, max_models=2, ttl=3.0) == ["a", "b"]
    assert evictable(reg, set(), 104.5, max_models=2, ttl=3.0, keep="a") == ["a", "b"]
    assert evictable(reg, set(), 104.5, max_models=1, ttl=0, keep="a") == ["b", "c"]
    assert next_check(reg.usage(), set(), 104.5, 3.0, ()) == 103.0
    assert next_check(reg.usage(), {"a"}, 104.5, 3.0, ()) == 104.0  # b's
    reg.pin("a")
    reg.pin("b")
    reg.pin("c")
    assert next_check(reg.usage(), set(), 104.5, 3.0, ()) == float("inf")


def test_a_models_keep_alive_replaces_the_ttl() -> None:
    reg = table_with("a", "b", "c")
    reg.keep_alive("a", 0.0)  # unload once idle, even with no TTL
    reg.keep_alive("b", math.inf)  # never by TTL
    assert evictable(reg, set(), 104.5, max_models=3, ttl=0) == ["a"]
    assert evictable(reg, {"a"}, 104.5, max_models=3, ttl=0) == []  # in use: it stays
    assert evictable(reg, set(), 104.5, max_models=3, ttl=3.0) == ["a"]  # b kept, c not due
    assert evictable(reg, set(), 110.0, max_models=3, ttl=3.0) == ["a", "c"]
    assert evictable(reg, set(), 110.0, max_models=1, ttl=0) == ["a", "b"]  # LRU still binds
    assert next_check(reg.usage(), set(), 104.5, 0, ()) == 100.0  # a is due
    assert next_check(reg.usage(), {"a"}, 104.5, 0, ()) == 105.5  # in use: a second on
    reg.keep_alive("a", None)
    assert next_check(reg.usage(), set(), 104.5, 0, ()) == math.inf


def test_a_chosen_model_is_looked_at_again_when_its_reservation_ends() -> None:
    reg = table_with("a", "b")
    reg.reserve("a", seconds=50.0)
    unload, doomed = choose_unloads(reg.usage(), set(), 0.0, max_models=1, ttl=0, keep="b")
    assert (unload, doomed) == ([], {"a"})
    entry = reg.get("a")
    assert entry is not None
    assert next_check(reg.usage(), set(), 0.0, 0, doomed) == entry.use.held_until


# ---- the engine --------------------------------------------------------------------


def test_loading_past_max_models_unloads_the_least_recently_used() -> None:
    backend = ResidentBackend()
    with make(backend, max_models=2) as engine:
        engine.load_model("/fake/a", name="a")
        engine.load_model("/fake/b", name="b")
        tokens, _ = engine.submit(req("a", [10], max_tokens=2)).collect()  # a is used last
        assert tokens == [11, 12]
        engine.load_model("/fake/c", name="c")
        assert loaded(engine) == ("a", "c") and backend.unloaded == ["b"]
        with pytest.raises(ModelNotFound):
            engine.submit(req("b", [10]))
        engine.load_model("/fake/b", name="b")  # loads again (a is now least recent)
        assert loaded(engine) == ("c", "b") and backend.loads == ["a", "b", "c", "b"]


def test_a_busy_model_stays_over_the_limit_and_unloads_when_idle() -> None:
    backend = ResidentBackend(gated={"a"})
    with make(backend, max_models=1) as engine:
        engine.load_model("/fake/a", name="a")
        handle = engine.submit(req("a", [10], max_tokens=5))
        assert wait_until(lambda: engine.stats().running == 1)
        engine.load_model("/fake/b", name="b")
        assert loaded(engine) == ("a", "b")  # over the limit rather than kill a stream
        backend.gate.set()
        tokens, fin = handle.collect()
        assert (tokens, fin.reason) == ([11, 12, 13, 14, 15], FinishReason.LENGTH)
        assert wait_until(lambda: loaded(engine) == ("b",))
        assert backend.unloaded == ["a"] and backend.runners[0].closed


def test_a_waiting_request_keeps_its_model() -> None:
    backend = ResidentBackend(gated={"b"})
    with make(backend, max_models=1) as engine:
        engine.load_model("/fake/b", name="b")
        running = engine.submit(req("b", [1], max_tokens=3))
        engine.load_model("/fake/a", name="a")
        queued = engine.submit(req("a", [20], max_tokens=3))  # waits for b's batch to drain
        engine.load_model("/fake/c", name="c")
        assert loaded(engine) == ("b", "a", "c")  # b running, a waiting, c just loaded
        backend.gate.set()
        assert running.collect()[0] == [2, 3, 4] and queued.collect()[0] == [21, 22, 23]
        # c's load chose b and a (least recently used, both busy): each went once idle
        assert wait_until(lambda: loaded(engine) == ("c",))
        assert backend.unloaded == ["b", "a"]


def test_pinned_models_are_never_unloaded() -> None:
    backend = ResidentBackend()
    with make(backend, max_models=1, model_ttl_seconds=0.05) as engine:
        engine.load_model("/fake/a", name="a", pin=True)
        engine.load_model("/fake/b", name="b")
        assert wait_until(lambda: loaded(engine) == ("a",))  # b: TTL
        engine.load_model("/fake/c", name="c")
        engine.load_model("/fake/d", name="d")  # c: LRU
        assert "a" in loaded(engine) and "c" not in loaded(engine)
        time.sleep(0.2)
        assert "a" in loaded(engine)
        assert engine.submit(req("a", [5], max_tokens=1)).collect()[0] == [6]


def test_the_model_loaded_last_stays_until_the_next_load() -> None:
    backend = ResidentBackend()
    with make(backend, max_models=1) as engine:
        engine.load_model("/fake/a", name="a", pin=True)
        engine.load_model("/fake/b", name="b")  # over the limit: its caller is about to use it
        assert engine.submit(req("a", [1], max_tokens=1)).collect()[0] == [2]
        assert loaded(engine) == ("a", "b")  # a's finish did not push b out
        engine.load_model("/fake/c", name="c")
        assert loaded(engine) == ("a", "c")


def test_a_reserved_model_waits_for_its_submit() -> None:
    backend = ResidentBackend()
    with make(backend, max_models=1, model_ttl_seconds=0.05) as engine:
        info = engine.load_model("/fake/a", name="a")
        assert engine.reserve("a") is info
        engine.load_model("/fake/b", name="b")
        time.sleep(0.2)  # several TTLs: the reservation holds against TTL and LRU alike
        assert "a" in loaded(engine)
        assert engine.submit(req("a", [1], max_tokens=1)).collect()[0] == [2]  # uses it
        assert wait_until(lambda: "a" not in loaded(engine))
        with pytest.raises(ModelNotFound):
            engine.reserve("a")


def test_an_unused_reservation_lapses() -> None:
    backend = ResidentBackend()
    with make(backend, max_models=1) as engine:
        engine.load_model("/fake/a", name="a")
        engine.reserve("a", seconds=0.1)
        engine.load_model("/fake/b", name="b")
        assert loaded(engine) == ("a", "b")
        # nothing else happens: the engine wakes up when the reservation ends
        assert wait_until(lambda: loaded(engine) == ("b",))


def test_pin_applies_to_an_already_loaded_model() -> None:
    with make(ResidentBackend(), max_models=1) as engine:
        first = engine.load_model("/fake/a", name="a")
        assert engine.load_model("/fake/a", name="a", pin=True) is first
        engine.load_model("/fake/b", name="b")
        engine.load_model("/fake/c", name="c")
        assert loaded(engine) == ("a", "c")


def test_ttl_unloads_an_idle_model_but_not_one_in_use() -> None:
    backend = ResidentBackend(gated={"a"})
    with make(backend, model_ttl_seconds=0.1) as engine:
        engine.load_model("/fake/a", name="a")
        handle = engine.submit(req("a", [10], max_tokens=3))
        time.sleep(0.4)  # several TTLs, all of them running
        assert loaded(engine) == ("a",)
        backend.gate.set()
        assert handle.collect()[0] == [11, 12, 13]
        assert wait_until(lambda: loaded(engine) == ())
        assert backend.unloaded == ["a"] and engine.health().ok


def test_keep_alive_zero_unloads_an_idle_model_and_a_long_one_outlives_the_ttl() -> None:
    backend = ResidentBackend()
    with make(backend) as engine:  # no TTL
        engine.load_model("/fake/a", name="a")
        engine.keep_alive("a", 0)
        assert wait_until(lambda: loaded(engine) == ())
        engine.keep_alive("nothing-loaded", 0)  # a model not loaded: nothing happens
        assert engine.health().ok
    with make(ResidentBackend(), model_ttl_seconds=0.5) as engine:
        engine.load_model("/fake/a", name="a")
        engine.keep_alive("a", math.inf)
        engine.load_model("/fake/b", name="b")
        assert wait_until(lambda: loaded(engine) == ("a",))  # b went by the TTL, a stays


def test_a_refused_submit_does_not_keep_its_model_loaded() -> None:
    backend = ResidentBackend()
    with make(backend, model_ttl_seconds=0.05) as engine:
        engine.load_model("/fake/a", name="a")
        with pytest.raises(InvalidRequest):
            engine.submit(req("a", []))  # empty prompt: refused after the model check
        assert wait_until(lambda: loaded(engine) == ())


def test_an_idle_engine_without_ttl_sleeps_without_a_timeout() -> None:
    with make(ResidentBackend()) as engine:
        engine.load_model("/fake/a", name="a")
        assert engine._core.residency.idle_timeout() is None
    with make(ResidentBackend(), model_ttl_seconds=60) as engine:
        engine.load_model("/fake/a", name="a", pin=True)
        assert (
            engine._core.residency.idle_timeout() is None
        )  # only pinned models: nothing can expire
        engine.load_model("/fake/b", name="b")
        timeout = engine._core.residency.idle_timeout()
        assert timeout is not None and 0 < timeout <= 60


def test_the_plain_fake_backend_swaps_within_the_limit() -> None:
    backend = FakeBackend()
    with make(backend, max_models=1) as engine:
        engine.load_model("/fake/a", name="a")
        assert engine.submit(req("a", [1], max_tokens=1)).collect()[0] == [2]
        engine.load_model("/fake/b", name="b")
        assert loaded(engine) == ("b",) and backend.runners[0].closed


# ---- settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("300", 300.0), ("2.5", 2.5), ("500ms", 0.5), ("30s", 30.0), ("5m", 300.0),
     ("1h", 3600.0), ("1h30m", 5400.0), (" 10 s ", 10.0)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1", "5x", "m", "1h30", "inf", "nan", "5 m 3"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = EngineConfig.from_settings()
    assert (cfg.max_models, cfg.model_ttl_seconds) == (2, 0.0)
    monkeypatch.setenv("MLXD_MAX_MODELS", "3")
    monkeypatch.setenv("MLXD_MODEL_TTL", "5m")
    cfg = EngineConfig.from_settings()
    assert (cfg.max_models, cfg.model_ttl_seconds) == (3, 300.0)
    monkeypatch.setenv("MLXD_MODEL_TTL", "soon")
    with pytest.raises(InvalidRequest, match="MLXD_MODEL_TTL"):
        EngineConfig.from_settings()
    with pytest.raises(InvalidRequest):
        EngineConfig(max_models=0)
    with pytest.raises(InvalidRequest):
        EngineConfig(model_ttl_seconds=-1)


def test_resident_counts_requests_per_model_and_says_when_each_unloads() -> None:
    backend = ResidentBackend(gated={"b"})
    with make(backend, max_models=3, model_ttl_seconds=600.0) as engine:
        engine.load_model("/fake/a", name="a", pin=True)
        engine.load_model("/fake/b", name="b")
        running = engine.submit(req("b", [1], max_tokens=3))
        assert wait_until(lambda: engine.stats().running == 1)
        engine.load_model("/fake/c", name="c")
        queued = engine.submit(req("c", [20], max_tokens=3))  # waits for b's batch to drain
        a, b, c = engine.resident()
        assert (a.name, a.pinned, a.unloads_in_seconds, a.ttl_seconds) == ("a", True, None, 600)
        assert (b.running, b.queued, b.unloads_in_seconds) == (1, 0, None)
        assert (c.running, c.queued, c.unloads_in_seconds) == (0, 1, None)
        backend.gate.set()
        running.collect()
        queued.collect()
        assert wait_until(lambda: all(m.running + m.queued == 0 for m in engine.resident()))
        idle = {m.name: m for m in engine.resident()}
        assert all(0 < idle[n].unloads_in_seconds <= 600 for n in "bc")  # type: ignore[operator]
        assert idle["c"].kind.value == "generation" and idle["c"].draft is None


def test_resident_models_count_embedding_jobs_as_running() -> None:
    from mlxd.engine.residency import resident_models

    a, b = resident_models(table_with("a", "b"), [], 60.0, 110.0, embedding=["b", "b"])
    assert (a.running, a.idle_seconds, a.unloads_in_seconds) == (0, 10.0, 50.0)
    assert (b.running, b.queued, b.unloads_in_seconds) == (2, 0, None)
    (never,) = resident_models(table_with("c"), [], 0.0, 110.0)
    assert (never.ttl_seconds, never.unloads_in_seconds) == (None, None)
