"""Connection limits uvicorn lacks: a time bound on request headers and a connection cap.

uvicorn times out only idle keep-alive connections (after a response); a connection that never
finishes (or never starts) its headers stays open forever, and `limit_concurrency` answers
503 only once a request arrives. This h11 protocol subclass (the one place that touches
uvicorn's protocol internals; tests/unit/server/guard/test_connections.py fails if an
upgrade changes them) adds:

- a header timeout: from the connection's start, or the end of its previous response, until
  a request's headers are complete; then the connection is closed;
- a connection cap: at the cap, a new connection pushes out the oldest one still waiting for
  headers, so idle sockets cannot lock out everyone else (and `/health` keeps answering); a
  new connection is refused (503, closed) only when every connection is busy with a request.

The body's own time bound is the Guard's (it reads the whole body first).
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mlxd.errors import InvalidRequest, MlxdError
from mlxd.server.error_responses import error_body, error_headers
from mlxd.server.sse import dumps

FD_RESERVE = 64  # file descriptors kept for model files, logs and the listening socket


class RequestTimeout(InvalidRequest):
    """The request body did not arrive within body_timeout_seconds."""

    http_status = 408
    code = "request_timeout"


class TooManyConnections(MlxdError):
    """Every connection up to max_connections is busy with a request."""

    http_status = 503
    error_type = "server_error"
    code = "too_many_connections"


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with a header timeout and a connection cap (set by `guarded_protocol`)."""

    header_timeout: float
    max_connections: int

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_since = time.monotonic()
        live = sum(1 for c in self.connections if not c.transport.is_closing())
        if live > self.max_connections and not self._evict_one():
            self._refuse()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting():
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        # Armed before uvicorn looks at pipelined data: a request already there cancels it.
        self._waiting_since = time.monotonic()
        self._arm_header_timer()
        super().on_response_complete()

    # ---- header timeout ----------------------------------------------------------------

    def _waiting(self) -> bool:
        """No request in progress: waiting for (the rest of) the next request's headers."""
        idle_cycle = self.cycle is None or self.cycle.response_complete
        return self.conn.their_state is h11.IDLE and idle_cycle

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._on_header_timeout)

    def _cancel_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        if self._waiting() and not self.transport.is_closing():
            self.transport.close()

    # ---- connection cap ----------------------------------------------------------------

    def _evict_one(self) -> bool:
        """Close the connection that has waited for headers the longest; False if none."""
        waiting = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, GuardedH11Protocol)
            and c._waiting()
            and not c.transport.is_closing()  # chosen already, leaving at the next loop turn
        ]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c._waiting_since)
        oldest._cancel_header_timer()
        oldest.transport.close()
        return True

    def _refuse(self) -> None:
        err = TooManyConnections(f"too many connections ({self.max_connections} busy)")
        body = dumps(error_body(err)).encode()
        headers = {"content-type": "application/json", **error_headers(err)}
        headers |= {"connection": "close", "content-length": str(len(body))}
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.transport.write(f"HTTP/1.1 503 Service Unavailable\r\n{head}\r\n".encode() + body)
        self.transport.close()


def guarded_protocol(header_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class to hand uvicorn.Config(http=...), with these limits. The cap is
    lowered to what the process's open-file limit allows (a few descriptors kept back)."""
    attrs: dict[str, Any] = {
        "header_timeout": header_timeout,
        "max_connections": max(1, min(max_connections, _fd_budget())),
    }
    return type("MlxdH11Protocol", (GuardedH11Protocol,), attrs)


def _fd_budget() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft - FD_RESERVE if soft != resource.RLIM_INFINITY else 1 << 20
