"""The engine's pure-Python parts over a fake backend: no mlx, no model."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mlxd.engine import Engine, EngineConfig, EngineRequest
from mlxd.errors import EngineBusy, InvalidRequest
from mlxd.types import FinishReason, SamplingParams, TokenEvent

from .fake_backend import FakeBackend


def make(backend: FakeBackend, **overrides) -> Engine:
    overrides.setdefault("max_batch", 4)
    return Engine(EngineConfig.from_settings(**overrides), backend=backend)


def req(model: str, prompt: list[int], **params) -> EngineRequest:
    return EngineRequest(model, prompt, SamplingParams(**params))


def test_tokens_stop_and_length_through_the_fake() -> None:
    backend = FakeBackend()
    with make(backend) as engine:
        engine.load_model("/fake/a", name="a")
        tokens, fin = engine.submit(req("a", [10, 20], max_tokens=3)).collect()
        assert (tokens, fin.reason) == ([21, 22, 23], FinishReason.LENGTH)
        tokens, fin = engine.submit(req("a", [10, 20], stop_token_ids=(23,))).collect()
        assert (tokens, fin.reason, fin.usage.completion_tokens) == ([21, 22], FinishReason.STOP, 3)
    assert backend.shut_down  # no mlx here: the import test checks that in a subprocess


def test_load_model_accepts_a_store_model_ref() -> None:
    from mlxd.store.model_ref import ModelRef

    with make(FakeBackend()) as engine:
        ref = ModelRef(name="org/m", path=Path("/fake/m"), source="store", revision=None)
        info = engine.load_model(ref)
        assert (info.name, info.path) == ("org/m", Path("/fake/m"))
        assert engine.load_model("/fake/m", name="org/m") is info
        assert engine.stats().models_loaded == ("org/m",)


def test_default_budget_is_the_rest_of_the_window() -> None:
    with make(FakeBackend(context_window=16)) as engine:
        engine.load_model("/fake/a", name="a")
        tokens, fin = engine.submit(req("a", list(range(1, 11)))).collect()
        assert len(tokens) == 6 and fin.reason is FinishReason.LENGTH


def test_model_swap_waits_for_running_requests() -> None:
    backend = FakeBackend()
    with make(backend) as engine:
        engine.load_model("/fake/a", name="a")
        engine.load_model("/fake/b", name="b")
        handles = [engine.submit(req(m, [i * 10 + 5], max_tokens=5)) for i, m in enumerate("aabba")]
        results = [h.collect() for h in handles]
        assert [len(t) for t, _ in results] == [5] * 5
        assert [r.model for r in backend.runners] == ["a", "b", "a"]
        assert all(r.closed for r in backend.runners[:2])


def test_failed_step_fails_the_batch_but_not_the_engine() -> None:
    backend = FakeBackend(fail_first_runner_at=5)
    with make(backend) as engine:
        engine.load_model("/fake/a", name="a")
        handle = engine.submit(req("a", [1], max_tokens=50))
        events = list(handle)
        tokens = [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]
        assert tokens == [2, 3, 4]  # three decode steps before the failing fifth
        fin = events[-1]
        assert fin.reason is FinishReason.ERROR and "fake step failure" in (fin.error or "")
        assert engine.health().ok
        tokens, fin = engine.submit(req("a", [1], max_tokens=2)).collect()
        assert (tokens, fin.reason) == ([2, 3], FinishReason.LENGTH)
        assert len(backend.runners) == 2  # a fresh batch after the failure


def test_failed_insert_fails_only_that_request() -> None:
    with make(FakeBackend(), max_queue=4) as engine:
        engine.load_model("/fake/a", name="a")
        bad = engine.submit(req("a", [666], max_tokens=2))
        good = engine.submit(req("a", [1], max_tokens=2))
        _, fin = bad.collect()
        assert fin.reason is FinishReason.ERROR and "fake insert failure" in (fin.error or "")
        assert good.collect()[0] == [2, 3]
        assert engine.stats().waiting == 0 and engine.health().ok


def test_a_failed_sampler_fails_only_its_request() -> None:
    with make(FakeBackend()) as engine:
        engine.load_model("/fake/a", name="a")
        bad = engine.submit(req("a", [777], max_tokens=5))
        good = engine.submit(req("a", [1], max_tokens=5))
        tokens, fin = bad.collect()
        assert tokens == [778, 779]  # the token of the failing step is not delivered
        assert fin.reason is FinishReason.ERROR and fin.error_code == "engine_error"
        assert "fake sampler failure" in (fin.error or "")
        assert good.collect()[0] == [2, 3, 4, 5, 6]
        assert engine.health().ok and engine.stats().counters.by_reason["error"] == 1


def test_idle_time_is_not_a_stall() -> None:
    def slow_first_step(site: str, request_id: str | None) -> None:
        if site == "step" and not stepped:
            stepped.append(True)
            time.sleep(0.1)  # well inside the watchdog period, but after a long idle time

    stepped: list[bool] = []
    with make(FakeBackend(), watchdog_seconds=0.5, fault_hook=slow_first_step) as engine:
        engine.load_model("/fake/a", name="a")
        time.sleep(1.0)  # idle for two watchdog periods
        tokens, fin = engine.submit(req("a", [1], max_tokens=3)).collect()
        assert (tokens, fin.reason) == ([2, 3, 4], FinishReason.LENGTH)
        assert engine.health().ok


def test_max_queue_zero_refuses_everything() -> None:
    with make(FakeBackend(), max_queue=0) as engine:
        engine.load_model("/fake/a", name="a")
        with pytest.raises(EngineBusy):
            engine.submit(req("a", [1], max_tokens=1))


@pytest.mark.parametrize(
    "overrides", [dict(max_batch=0), dict(prefill_chunk=0), dict(watchdog_seconds=0)]
)
def test_bad_engine_config_is_refused(overrides) -> None:
    with pytest.raises(InvalidRequest):
        EngineConfig.from_settings(**overrides)


def test_config_reads_settings_and_kwargs_override(monkeypatch) -> None:
    monkeypatch.setenv("MLXD_MAX_BATCH", "3")
    monkeypatch.setenv("MLXD_MAX_TOKENS_CEILING", "0")
    cfg = EngineConfig.from_settings(max_queue=5)
    assert (cfg.max_batch, cfg.max_queue, cfg.max_tokens_ceiling) == (3, 5, None)
    monkeypatch.setenv("MLXD_MAX_TOKENS_CEILING", "100")
    assert EngineConfig.from_settings().max_tokens_ceiling == 100
    with pytest.raises(TypeError):
        EngineConfig.from_settings(bogus=1)


def test_a_request_waits_for_a_prefix_another_is_prefilling_and_keeps_its_place() -> None:
    """Requests arriving together that share a prefix: the second starts once the first's
    prefill has snapshotted it; an unrelated one behind it is not held back."""
    backend = FakeBackend(context_window=256)
    submitted = threading.Event()

    def hold_first_step(site: str, request_id: str | None) -> None:
        if site == "step":
            submitted.wait(10)  # the three are queued before the first one advances

    with make(backend, fault_hook=hold_first_step) as engine:
        engine.load_model("/fake/a", name="a")
        shared = [555, *range(1, 40)]  # 40 tokens: 10 prefill steps of 4
        handles = [
            engine.submit(req("a", prompt, max_tokens=2))
            for prompt in (shared, [*shared, 7], [9, 8, 7])
        ]
        submitted.set()
        for handle in handles:
            assert handle.collect()[1].reason is FinishReason.LENGTH
        (runner,) = backend.runners
        steps = {first: step for first, step in runner.inserted}
        firsts = [first for first, _ in runner.inserted]
        assert firsts == [555, 9, 555]  # the unrelated one went ahead
        assert steps[9] == 0 and runner.inserted[2][1] >= 10  # after the 10 prefill steps
