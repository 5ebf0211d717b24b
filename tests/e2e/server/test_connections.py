"""Hostile connections on a real `mlxd serve`: oversized bodies, slow headers, idle sockets.

Raw sockets, because HTTP clients hide exactly what matters here (who closes, and when).
Every socket has a timeout, so a server that never closes fails the test instead of hanging.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env

WAIT_S = 20.0  # a hang guard, not a threshold: the closes under test come after 1 s


def connect(server: ServerProcess) -> socket.socket:
    url = urlsplit(server.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes; raises TimeoutError if it never does."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def head(path: str, length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    else:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a full response: {data!r}"
        data += chunk
    headers, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in headers.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return headers + b"\r\n\r\n" + body


def test_413_on_content_length_closes_the_connection(server: ServerProcess) -> None:
    total = 256 << 20
    sock = connect(server)
    sock.sendall(head("/v1/chat/completions", total) + b'{"messages": [' + b" " * 65536)
    reply = read_response(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"connection: close" in reply.lower()
    # The rest of the announced body must not be read: the server hung up.
    sent, refused = 65536, False
    try:
        while sent < total:
            sock.sendall(b" " * (1 << 20))
            sent += 1 << 20
    except (BrokenPipeError, ConnectionResetError):
        refused = True
    assert refused, f"the server read all {sent} bytes of a refused body"
    assert read_until_closed(sock) == b""
    sock.close()


def test_413_on_a_counted_chunked_body_closes_the_connection(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(head("/v1/chat/completions"))
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    reply = b""
    try:
        for _ in range(64):  # 64 MiB offered; the cap is 4 MiB
            sock.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed while we were still sending: what we want
    reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    sock.close()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


# ---- slow and idle clients ------------------------------------------------------------


def assert_closed_by_server(sock: socket.socket) -> None:
    """The server closes `sock` (a TimeoutError after WAIT_S if it never does)."""
    assert read_until_closed(sock) == b""


def health_ok(server: ServerProcess) -> bool:
    return httpx.get(server.url + "/health", timeout=WAIT_S).status_code == 200


@pytest.fixture(scope="module")
def strict_server(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    """Timeouts of one second, so the test sees them act."""
    env = server_env(
        server_home, MLXD_HEADER_TIMEOUT="1", MLXD_KEEP_ALIVE="1", MLXD_BODY_TIMEOUT="1"
    )
    srv = launch(["--model", str(tiny_chat_model)], env)
    yield srv
    srv.stop()


def test_slow_headers_and_idle_connections_are_closed(strict_server: ServerProcess) -> None:
    silent = [connect(strict_server) for _ in range(20)]  # connect, then never say a word
    slow = [connect(strict_server) for _ in range(20)]  # headers that never end
    for sock in slow:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert health_ok(strict_server)  # served meanwhile
    for sock in silent + slow:
        assert_closed_by_server(sock)
        sock.close()


def test_idle_keep_alive_connection_is_closed(strict_server: ServerProcess) -> None:
    sock = connect(strict_server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert read_response(sock).startswith(b"HTTP/1.1 200")
    assert_closed_by_server(sock)  # then idle: closed after the keep-alive time
    sock.close()


def test_slow_body_gets_408_and_is_closed(strict_server: ServerProcess) -> None:
    sock = connect(strict_server)
    sock.sendall(head("/v1/chat/completions", 1000) + b'{"messages": ')  # and no more
    reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"request_timeout" in reply
    sock.close()


def test_connection_cap_evicts_the_oldest_idle_connection(
    tiny_chat_model: Path, server_home: Path
) -> None:
    """At the cap, a new connection pushes out the oldest one still waiting for headers,
    so idle sockets cannot lock everyone else out: /health keeps answering."""
    env = server_env(server_home, MLXD_MAX_CONNECTIONS="16", MLXD_HEADER_TIMEOUT="600")
    srv = launch(["--model", str(tiny_chat_model)], env)
    try:
        idle = [connect(srv) for _ in range(40)]
        for _ in range(3):
            assert health_ok(srv)
        for sock in idle[:24]:  # 40 + 3 opened, 16 may stay: the first 27 went, oldest first
            assert_closed_by_server(sock)
        for sock in idle:
            sock.close()
    finally:
        srv.stop()
