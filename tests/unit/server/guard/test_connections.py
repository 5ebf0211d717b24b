"""server/connections.py subclasses uvicorn's H11Protocol: these tests drive the real class
through a fake transport, so an uvicorn upgrade that changes what we rely on fails here."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from mlxd.server.guard.connections import GuardedH11Protocol, guarded_protocol


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.written = b""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name in ("peername", "sockname") else default

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _connections(cls: type[GuardedH11Protocol], n: int) -> tuple[list[Any], list[FakeTransport]]:
    config = uvicorn.Config(_app, http=cls, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    protos, transports = [], []
    for _ in range(n):
        proto = cls(config=config, server_state=state, app_state={}, _loop=loop)
        transport = FakeTransport()
        proto.connection_made(transport)
        protos.append(proto)
        transports.append(transport)
    return protos, transports


def test_header_timeout_closes_a_connection_with_unfinished_headers() -> None:
    async def scenario() -> None:
        cls = guarded_protocol(header_timeout=0.01, max_connections=8)
        (proto,), (transport,) = _connections(cls, 1)
        proto.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n")  # no blank line: not finished
        await asyncio.sleep(0.1)
        assert transport.closed

    asyncio.run(scenario())


def test_complete_headers_cancel_the_header_timeout() -> None:
    async def scenario() -> None:
        cls = guarded_protocol(header_timeout=0.05, max_connections=8)
        (proto,), (transport,) = _connections(cls, 1)
        proto.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        await asyncio.sleep(0.2)  # headers done, body pending: not the header timeout's job
        assert not transport.closed

    asyncio.run(scenario())


def test_cap_evicts_the_oldest_waiting_connection() -> None:
    async def scenario() -> None:
        cls = guarded_protocol(header_timeout=60, max_connections=2)
        _protos, transports = _connections(cls, 4)
        assert [t.closed for t in transports] == [True, True, False, False]

    asyncio.run(scenario())


def test_cap_refuses_when_every_connection_is_busy() -> None:
    async def scenario() -> None:
        cls = guarded_protocol(header_timeout=60, max_connections=1)
        (busy,), (busy_transport,) = _connections(cls, 1)
        busy.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        # A second connection of the same server (same ServerState: same connection set).
        extra = cls(config=busy.config, server_state=busy.server_state, app_state={})
        transport = FakeTransport()
        extra.connection_made(transport)
        assert transport.closed and transport.written.startswith(b"HTTP/1.1 503")
        head, _, body = transport.written.partition(b"\r\n\r\n")
        assert b"\r\nretry-after: 1\r\n" in head and b"connection: close" in head
        assert json.loads(body)["error"]["code"] == "too_many_connections"
        assert not busy_transport.closed

    asyncio.run(scenario())
