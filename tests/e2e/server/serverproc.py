"""Helpers for the server's end-to-end tests: start real `mlxd serve` processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.signals import default_sigint

READY = re.compile(r"mlxd serve: (\S+) on (http://\S+)/v1")
START_TIMEOUT_S = 120.0  # generous: the first start on a cold, busy CI machine imports mlx


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    model: str = ""
    stderr: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=timeout)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        MLXD_HOME=str(home / "mlxd"),
        HF_HOME=str(home / "hf"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("MLXD_API_KEY", None)
    env.update(extra)
    return env


def _child_setup(extra: Callable[[], None] | None) -> None:
    default_sigint()  # some tests press Ctrl-C
    if extra is not None:
        extra()


def launch(
    args: list[str],
    env: dict[str, str],
    wait_ready: bool = True,
    preexec_fn: Callable[[], None] | None = None,
    launcher: list[str] | None = None,
) -> ServerProcess:
    """Start `mlxd serve ARGS --port 0`; wait for its ready line and a 200 from /health.
    `preexec_fn` runs in the child before it starts (e.g. tests.hostile.memory_capped()).
    `launcher` runs the Python command through a launcher (mlx.launch ... --python)."""
    python = launcher if launcher is not None else [sys.executable]
    cmd = [*python, "-m", "mlxd.cli.main", "serve", "--port", "0", *args]
    proc = subprocess.Popen(
        cmd,
        env=env,
        # mlx.launch polls its stdin to relay it: at end of file (DEVNULL) that spins a core.
        stdin=subprocess.PIPE if launcher is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: _child_setup(preexec_fn),
    )
    server = ServerProcess(proc, env)
    ready = threading.Event()

    def pump() -> None:  # keep stderr drained for the process's whole life
        assert proc.stderr is not None
        for line in proc.stderr:
            server.stderr.append(line)
            m = READY.search(line)
            if m and not ready.is_set():
                server.model, server.url = m.group(1), m.group(2)
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not wait_ready:
        return server
    if not ready.wait(START_TIMEOUT_S) or not server.url:
        proc.kill()
        raise RuntimeError("mlxd serve did not start:\n" + "".join(server.stderr))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.url + "/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("mlxd serve never became healthy:\n" + "".join(server.stderr))


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll until predicate() is true: a liveness bound, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def metric(text: str, name: str) -> float:
    """The value of one sample line `name value` in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0
