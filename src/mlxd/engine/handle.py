"""RequestHandle: what `Engine.submit` returns; iterate it (sync or async) and cancel it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from mlxd.engine.collector import Collector
from mlxd.engine.request import Request, RequestStatus
from mlxd.types import EngineEvent, FinishEvent, TokenEvent


class RequestHandle:
    """Yields TokenEvents then exactly one FinishEvent. Closing the iterator early (break,
    GeneratorExit, task cancellation) cancels the request."""

    __slots__ = ("request_id", "_request", "_collector", "_canceller", "_cancel_sent")

    def __init__(self, request: Request, canceller: Callable[[str], None]) -> None:
        self.request_id = request.request_id
        self._request = request
        self._collector: Collector = request.collector
        self._canceller = canceller
        self._cancel_sent = False

    @property
    def status(self) -> RequestStatus:
        """Where the request is now (waiting, prefilling, decoding, finished); advisory."""
        return self._request.status

    @property
    def admitted(self) -> bool:
        """The engine has taken the request into its batch (or already ended it)."""
        return self._request.status is not RequestStatus.WAITING

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens read from the prefix cache: known once `admitted` (0 before)."""
        return self._request.cached_tokens

    @property
    def max_tokens(self) -> int:
        """The generation budget the engine gave this request."""
        return self._request.max_tokens

    def cancel(self) -> None:
        """Idempotent; the stream ends with FinishEvent(CANCELLED) unless it already ended."""
        if self._cancel_sent or self._collector.finished:
            return
        self._cancel_sent = True
        self._canceller(self.request_id)

    @property
    def finished(self) -> bool:
        return self._collector.finished

    def shown(self) -> None:
        """Say the consumer has shown output: later tokens may come once per stream interval
        (until then, for an `until_shown` request, every step's token is delivered at once)."""
        self._collector.shown()

    def __iter__(self) -> Iterator[EngineEvent]:
        collector = self._collector
        try:
            while not collector.done:
                yield from collector.take()
        finally:
            if not collector.done:
                self.cancel()

    async def __aiter__(self) -> AsyncIterator[EngineEvent]:
        collector = self._collector
        try:
            while not collector.done:
                for event in await collector.take_async():
                    yield event
        finally:
            if not collector.done:
                self.cancel()

    def collect(self) -> tuple[list[int], FinishEvent]:
        """Run to the end: (all token ids, the FinishEvent)."""
        tokens: list[int] = []
        for event in self:
            if isinstance(event, TokenEvent):
                tokens.extend(event.token_ids)
            else:
                return tokens, event
        raise AssertionError("stream ended without a FinishEvent")
