"""Collector: the per-request mailbox between the engine thread and one consumer.

The engine thread appends to a deque (atomic, lock-free) and takes the lock only when a
consumer is actually asleep, so it never waits on a consumer holding the lock; a consumer
that falls behind receives everything produced meanwhile merged into one TokenEvent. Sync
consumers sleep on a Condition; async ones on an asyncio Future resolved via
`loop.call_soon_threadsafe` (a bare Future: cheaper than an asyncio.Event, which wraps one).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlxd.types import EngineEvent, FinishEvent, TokenEvent, TokenLogprob

if TYPE_CHECKING:  # imported by async consumers only: `mlxd run` never loads asyncio
    import asyncio


class Collector:
    __slots__ = (
        "_lock",
        "_cond",
        "_items",
        "_finish",
        "_delivered",
        "_sleeping",
        "_waiters",
        "until_shown",
    )

    def __init__(self, until_shown: bool = False) -> None:
        # `with self._lock` holds the condition's own lock; unlike `with self._cond` it does
        # not go through Condition's Python-level __enter__/__exit__ (hot path: every token).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._items: deque[tuple[int, TokenLogprob | None]] = deque()
        self._finish: FinishEvent | None = None
        self._delivered = False  # the FinishEvent has been handed to the consumer
        self._sleeping = False  # a sync consumer waits on _cond
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # The consumer turns tokens into text that may be held back (half a UTF-8 character,
        # a possible stop string): wake it every step, not once per stream interval, until it
        # has shown something and calls shown(); else each held token adds an interval
        # (20 ms) to its time to first output (measured: 17 -> 4 ms on the tiny model).
        self.until_shown = until_shown

    # ---- producer side (engine thread, or any thread failing the request) ----

    def push(self, token: int, logprob: TokenLogprob | None, *, wake: bool = True) -> None:
        """Append one token. The engine passes wake=False and calls `wake()` once at the end
        of its step, so consumers are woken together rather than in the middle of it."""
        if self._finish is not None:
            return
        self._items.append((token, logprob))
        if wake:
            self.wake()

    def put(self, token: int, logprob: TokenLogprob | None) -> None:
        """`push(..., wake=False)`, the engine's hot path: one token, no wake-up."""
        if self._finish is None:
            self._items.append((token, logprob))

    def wake(self, batch: WakeBatch | None = None) -> None:
        """Wake a sleeping consumer. With `batch`, async wake-ups are gathered so that the
        engine sends one `call_soon_threadsafe` per event loop per step, not one per request."""
        # Checked after the append: a consumer going to sleep re-checks _items under the
        # lock after setting these flags, so no wake-up is lost.
        if self._sleeping or self._waiters:
            with self._lock:
                self._wake(batch)

    def finish(self, event: FinishEvent) -> bool:
        """Set the final event; the first call wins. Returns whether this call set it."""
        with self._lock:
            if self._finish is not None:
                return False
            self._finish = event
            self._wake()
            return True

    def _wake(self, batch: WakeBatch | None = None) -> None:
        # Caller holds the lock, so _sleeping is exact; Condition.notify_all is Python code
        # (it checks ownership and scans its waiters), too slow to run for every async token.
        if self._sleeping:
            self._cond.notify_all()
        if self._waiters:
            for loop, fut in self._waiters:
                if batch is not None:
                    batch.add(loop, fut)
                else:
                    _call_soon(loop, _resolve, fut)
            self._waiters.clear()

    # ---- consumer side ----

    def shown(self) -> None:
        """The consumer has shown output: from now on, wake it once per stream interval."""
        self.until_shown = False

    @property
    def finished(self) -> bool:
        return self._finish is not None

    @property
    def done(self) -> bool:
        """The consumer has received the FinishEvent."""
        return self._delivered

    def take(self, timeout: float | None = None) -> list[EngineEvent]:
        """Block until there is something (or `timeout` passes); return pending events."""
        events = self._drain()
        if events or self._delivered:
            return events
        with self._cond:
            self._sleeping = True
            try:
                if not self._items and self._finish is None:
                    self._cond.wait(timeout)
            finally:
                self._sleeping = False
        return self._drain()

    def poll(self) -> list[EngineEvent]:
        return self._drain()

    async def take_async(self) -> list[EngineEvent]:
        """Wait without blocking the event loop; return pending events."""
        while True:
            events = self._drain()
            if events or self._delivered:
                return events
            import asyncio

            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            with self._lock:
                if self._items or self._finish is not None:
                    continue
                self._waiters.append((loop, fut))
            await fut

    def _drain(self) -> list[EngineEvent]:
        """Single consumer: pops what is there now (tokens first, then the finish)."""
        finish = self._finish  # read before popping: tokens pushed before it are included
        events: list[EngineEvent] = []
        items = self._items
        if len(items) == 1:  # the common case of a consumer keeping up: one token per step
            token, lp = items.popleft()
            events.append(TokenEvent((token,), () if lp is None else (lp,)))
        elif items:
            tokens: list[int] = []
            logprobs: list[TokenLogprob] = []
            for _ in range(len(items)):
                token, lp = items.popleft()
                tokens.append(token)
                if lp is not None:
                    logprobs.append(lp)
            events.append(TokenEvent(tuple(tokens), tuple(logprobs)))
        if finish is not None and not self._delivered:
            if items:  # pushed between the reads: deliver them first, finish next time
                return events
            events.append(finish)
            self._delivered = True
        return events


class WakeBatch:
    """Consumer futures to resolve, grouped by event loop; `send()` once per engine step."""

    __slots__ = ("_by_loop",)

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
        futs = self._by_loop.get(loop)
        if futs is None:
            self._by_loop[loop] = [fut]
        else:
            futs.append(fut)

    def send(self) -> None:
        """Wake the gathered async consumers: one call per event loop."""
        if self._by_loop:
            for loop, futs in self._by_loop.items():
                _call_soon(loop, _resolve_all, futs)
            self._by_loop.clear()


class StreamWaker:
    """When the engine thread wakes stream consumers. A first token is delivered at once
    (time to first token); later tokens at most once per `interval_s` (0: every step), since
    each wake-up costs the engine thread GIL time; everything pending goes out before a step
    that may be long (`flush`). Finishes wake their consumer themselves (Collector.finish)."""

    __slots__ = ("interval_s", "_batch", "_unwoken", "_last_flush")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._batch = WakeBatch()
        self._unwoken: dict[Collector, None] = {}  # tokens pushed, consumer not yet woken
        self._last_flush = 0.0

    @property
    def pending(self) -> bool:
        return bool(self._unwoken)

    def step_done(self, now: float, first: list[Collector], later: list[Collector]) -> None:
        """After a step pushed tokens: `first` are woken now (a first token, or a consumer
        that shows nothing yet: until_shown), `later` at the next interval."""
        unwoken = self._unwoken
        for collector in later:
            unwoken[collector] = None
        if now - self._last_flush >= self.interval_s:
            self.flush(now, first)
        elif first:
            self.wake(first)

    def flush(self, now: float, also: list[Collector] | None = None) -> None:
        """Wake every consumer with undelivered tokens (and `also`)."""
        self._last_flush = now
        collectors = list(self._unwoken)
        self._unwoken.clear()
        self.wake(collectors + also if also else collectors)

    def wake(self, collectors: list[Collector]) -> None:
        """Wake these consumers now: one call per event loop."""
        batch = self._batch
        for collector in collectors:
            collector.wake(batch)
        batch.send()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a cancelled consumer task cancels its future
        fut.set_result(None)


def _resolve_all(futs: list[asyncio.Future[None]]) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(None)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # that consumer's loop is closed: nobody to wake
        pass
