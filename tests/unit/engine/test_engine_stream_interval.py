"""stream_interval_s: consumers are woken at most once per interval, except for first tokens,
finishes, and before a step that prefills. Driven step by step on EngineCore (no threads)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from mlxd.engine.collector import Collector, StreamWaker
from mlxd.engine.core import EngineCore, LiveRequests
from mlxd.engine.engine_config import EngineConfig
from mlxd.engine.inbox import LoadModel, Submit
from mlxd.engine.loaded_models import LoadedModels
from mlxd.engine.request import Request
from mlxd.types import FinishEvent, SamplingParams, TokenEvent

from .fake_backend import FakeBackend


class RecordingWaker(StreamWaker):
    """Records which collectors each wake-up reaches."""

    __slots__ = ("woken",)

    def __init__(self, interval_s: float) -> None:
        super().__init__(interval_s)
        self.woken: list[list[Collector]] = []

    def wake(self, collectors: list[Collector]) -> None:
        self.woken.append(list(collectors))
        super().wake(collectors)


class RecordingCore(EngineCore):
    """An engine core whose wake-ups are recorded, driven step by step."""

    def __init__(self, interval: float) -> None:
        cfg = EngineConfig.from_settings(max_batch=4, stream_interval_s=interval)
        super().__init__(cfg, FakeBackend(), LoadedModels(), LiveRequests(), lambda: None)
        self.waker = self.recorder = RecordingWaker(interval)
        reply: Future = Future()
        self.handle(LoadModel("m", Path("/fake/m"), reply))
        reply.result(timeout=1)

    def submit(self, prompt: list[int], max_tokens: int, until_shown: bool = False) -> Request:
        collector = Collector(until_shown=until_shown)
        request = Request(f"r{prompt[0]}", "m", prompt, SamplingParams(), max_tokens, collector)
        self.live.add(request)
        self.handle(Submit(request))
        return request


def run(core: RecordingCore, steps: int) -> None:
    for _ in range(steps):
        core.step()


def wakes_of(core: RecordingCore, request: Request) -> int:
    return sum(request.collector in batch for batch in core.recorder.woken)


def test_interval_zero_wakes_every_step() -> None:
    core = RecordingCore(0.0)
    a = core.submit([10], max_tokens=20)
    run(core, 10)
    assert a.completion_tokens == 9  # the fake prefills one step first
    assert wakes_of(core, a) == 9


def test_long_interval_wakes_for_the_first_token_only_and_loses_nothing() -> None:
    core = RecordingCore(1.0)
    a = core.submit([10], max_tokens=20)
    run(core, 10)
    assert a.completion_tokens == 9
    assert wakes_of(core, a) == 1  # the first token; the next 8 wait for the interval
    run(core, 15)  # finishes: the FinishEvent wakes the consumer itself
    events = a.collector.poll()
    tokens = [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]
    assert tokens == list(range(11, 31))
    assert isinstance(events[-1], FinishEvent)


def test_an_until_shown_consumer_is_woken_every_step_until_it_has_shown_output() -> None:
    core = RecordingCore(1.0)
    a = core.submit([10], max_tokens=40, until_shown=True)
    b = core.submit([20], max_tokens=40)
    run(core, 6)
    assert (wakes_of(core, a), wakes_of(core, b)) == (5, 1)  # a shows nothing yet
    a.collector.shown()
    run(core, 5)
    assert (wakes_of(core, a), wakes_of(core, b)) == (5, 1)  # both wait for the interval


def test_pending_tokens_are_delivered_before_a_prefill_step() -> None:
    core = RecordingCore(1.0)
    a = core.submit([10], max_tokens=50)
    run(core, 5)  # a decodes; its tokens 2..5 wait for the interval
    assert core.waker.pending  # a's tokens wait
    b = core.submit(list(range(100, 140)), max_tokens=5)  # 40 tokens: prefill takes 10 steps
    runner = core.runner
    assert runner is not None
    calls: list[bool] = []
    step = runner.step

    def checked_step():
        calls.append(runner.prefill_pending and core.waker.pending)
        return step()

    runner.step = checked_step  # type: ignore[method-assign]
    run(core, 12)
    assert calls and not any(calls)  # never prefilled while a's tokens sat undelivered
    assert wakes_of(core, a) >= 10  # one before each of b's prefill steps
    assert wakes_of(core, b) == 1  # b's first token
