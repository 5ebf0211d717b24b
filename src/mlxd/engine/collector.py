"""Collector: the per-request mailbox between the engine thread and one consumer.

The engine thread only appends (never blocks on the consumer); a consumer that falls behind
receives the tokens produced meanwhile merged into one TokenEvent. Sync consumers wait on a
Condition; async consumers on an asyncio.Event set through `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading

from mlxd.types import EngineEvent, FinishEvent, TokenEvent, TokenLogprob


class Collector:
    __slots__ = ("_cond", "_tokens", "_logprobs", "_finish", "_delivered", "_waiters")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._tokens: list[int] = []
        self._logprobs: list[TokenLogprob] = []
        self._finish: FinishEvent | None = None
        self._delivered = False  # the FinishEvent has been handed to the consumer
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # ---- producer side (engine thread, or any thread failing the request) ----

    def push(self, token: int, logprob: TokenLogprob | None) -> None:
        with self._cond:
            if self._finish is not None:
                return
            self._tokens.append(token)
            if logprob is not None:
                self._logprobs.append(logprob)
            self._wake()

    def finish(self, event: FinishEvent) -> bool:
        """Set the final event; the first call wins. Returns whether this call set it."""
        with self._cond:
            if self._finish is not None:
                return False
            self._finish = event
            self._wake()
            return True

    def _wake(self) -> None:
        self._cond.notify_all()
        if self._waiters:
            for loop, ev in self._waiters:
                try:
                    loop.call_soon_threadsafe(ev.set)
                except RuntimeError:  # that consumer's loop is closed: nobody to wake
                    pass
            self._waiters.clear()

    # ---- consumer side ----

    @property
    def finished(self) -> bool:
        return self._finish is not None

    @property
    def done(self) -> bool:
        """The consumer has received the FinishEvent."""
        return self._delivered

    def take(self, timeout: float | None = None) -> list[EngineEvent]:
        """Block until there is something (or `timeout` passes); return pending events."""
        with self._cond:
            if not self._tokens and self._finish is None and not self._delivered:
                self._cond.wait(timeout)
            return self._drain()

    def poll(self) -> list[EngineEvent]:
        with self._cond:
            return self._drain()

    async def take_async(self) -> list[EngineEvent]:
        """Wait without blocking the event loop; return pending events."""
        while True:
            with self._cond:
                events = self._drain()
                if events or self._delivered:
                    return events
                ev = asyncio.Event()
                self._waiters.append((asyncio.get_running_loop(), ev))
            await ev.wait()

    def _drain(self) -> list[EngineEvent]:
        events: list[EngineEvent] = []
        if self._tokens:
            events.append(TokenEvent(tuple(self._tokens), tuple(self._logprobs)))
            self._tokens = []
            self._logprobs = []
        if self._finish is not None and not self._delivered:
            events.append(self._finish)
            self._delivered = True
        return events
