"""Shutdown and drain: which generations are in flight, and ending them on time.

SIGTERM / first Ctrl-C: `draining` turns on (new requests get 503), running generations
get up to drain_seconds, the rest are cancelled and end with an error event.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from mlxd.errors import EngineUnavailable


class Cancellable(Protocol):
    def cancel(self) -> None: ...


@dataclass(slots=True, eq=False)
class Generation:
    """One in-flight generation as the lifecycle sees it."""

    stream: Cancellable
    aborted: bool = False  # ended by shutdown, not by the client or the model

    def abort(self) -> None:
        self.aborted = True
        self.stream.cancel()


@dataclass(slots=True)
class Lifecycle:
    draining: bool = False
    active: set[Generation] = field(default_factory=set)
    _idle: asyncio.Event | None = None

    def begin(self, stream: Cancellable) -> Generation:
        """Register a generation; refuse it (503) once draining started."""
        if self.draining:
            raise EngineUnavailable("server is shutting down")
        gen = Generation(stream)
        self.active.add(gen)
        return gen

    def end(self, gen: Generation) -> None:
        self.active.discard(gen)
        if not self.active and self._idle is not None:
            self._idle.set()

    async def drain(self, timeout_s: float) -> int:
        """Stop admitting, wait up to timeout_s for running generations, abort the rest.

        Returns how many were aborted.
        """
        self.draining = True
        if self.active:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), timeout=max(timeout_s, 0.0))
            except TimeoutError:
                pass
        return self.abort_all()

    def abort_all(self) -> int:
        self.draining = True
        leftover = list(self.active)
        for gen in leftover:
            gen.abort()
        return len(leftover)
