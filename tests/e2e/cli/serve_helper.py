"""Start a real `mlxd serve` process on a free loopback port and wait until it is ready."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.e2e.cli.cli_helpers import MLXD


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mlxd_server(
    model: Path | str, env: dict[str, str], timeout: float = 120, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """Yield the server's base URL (…/v1); stop the process afterwards. `extra`: more serve
    flags."""
    port = free_port()
    proc = subprocess.Popen(
        [*MLXD, "serve", "--model", str(model), "--port", str(port), *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_ready(proc, f"http://127.0.0.1:{port}/health", timeout)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(proc: subprocess.Popen[str], url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlxd serve exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("mlxd serve did not become ready")
