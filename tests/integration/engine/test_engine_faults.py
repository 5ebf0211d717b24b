"""Failure containment: one bad request fails alone; a fatal fault or a stall ends every
handle with an error and shows in health()."""

from __future__ import annotations

import threading

import pytest

from mlxd.engine import RequestHandle
from mlxd.errors import EngineUnavailable
from mlxd.types import FinishReason

from .engine_helpers import random_prompts, request


def test_fault_in_one_request_leaves_the_others_finishing(make_engine, tiny_chat_model) -> None:
    doomed: set[str] = set()

    def hook(site: str, request_id: str | None) -> None:
        if site == "sample" and request_id in doomed:
            raise RuntimeError("injected sampler fault")

    reference = make_engine()
    info = reference.load_model(tiny_chat_model)
    prompts = random_prompts(4, info.vocab_size, (5, 40), seed=10)
    expected = [
        reference.submit(request(info, p, max_tokens=30, ignore_eos=True)).collect()[0]
        for p in prompts
    ]
    sampled = dict(temperature=0.8, seed=3, max_tokens=30, ignore_eos=True)
    engine = make_engine(fault_hook=hook)
    engine.load_model(tiny_chat_model)
    bad_greedy = engine.submit(request(info, prompts[0], max_tokens=30, ignore_eos=True))
    bad_sampled = engine.submit(request(info, prompts[1], **sampled))
    doomed.update({bad_greedy.request_id, bad_sampled.request_id})
    good = [engine.submit(request(info, p, max_tokens=30, ignore_eos=True)) for p in prompts]
    for bad in (bad_greedy, bad_sampled):
        _, fin = bad.collect()
        assert fin.reason is FinishReason.ERROR
        assert "injected sampler fault" in (fin.error or "")
    assert [h.collect()[0] for h in good] == expected
    assert engine.health().ok
    assert engine.stats().counters.by_reason["error"] == 2


def test_fatal_fault_ends_every_handle_and_health_reports_it(make_engine, tiny_chat_model) -> None:
    armed = threading.Event()

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and armed.is_set():
            raise RuntimeError("injected engine fault")

    engine = make_engine(max_batch=2, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    handles: list[RequestHandle] = [
        engine.submit(request(info, [100 + i], max_tokens=2000, ignore_eos=True))
        for i in range(4)  # two run, two wait
    ]
    events = iter(handles[0])  # kept alive: dropping a live iterator cancels the request
    next(events)
    armed.set()
    finishes = [h.collect()[1] for h in handles]
    assert {f.reason for f in finishes} == {FinishReason.ERROR}
    assert all("injected engine fault" in (f.error or "") for f in finishes)
    assert {f.error_code for f in finishes} == {"engine_error"}
    health = engine.health()
    assert (health.ok, health.state) == (False, "failed")
    assert "injected engine fault" in (health.detail or "")
    with pytest.raises(EngineUnavailable, match="failed"):
        engine.submit(request(info, [5], max_tokens=1))
    with pytest.raises(EngineUnavailable):
        engine.load_model(tiny_chat_model, name="again")


def test_watchdog_fails_handles_when_a_step_hangs(make_engine, tiny_chat_model) -> None:
    hang = threading.Event()
    release = threading.Event()

    def hook(site: str, request_id: str | None) -> None:
        if site == "step" and hang.is_set():
            release.wait(30)  # a step that never returns (until the test ends)

    engine = make_engine(watchdog_seconds=0.3, fault_hook=hook)
    info = engine.load_model(tiny_chat_model)
    handle = engine.submit(request(info, [110], max_tokens=2000, ignore_eos=True))
    events = iter(handle)  # kept alive: dropping a live iterator cancels the request
    next(events)
    hang.set()
    _, fin = handle.collect()
    release.set()
    assert fin.reason is FinishReason.ERROR and fin.error_code == "engine_error"
    assert "no engine progress" in (fin.error or "")
    health = engine.health()
    assert (health.ok, health.state) == (False, "stalled")
