"""Helpers for `mlxd run/chat --server`: a real `mlxd serve` (with an API key) whose store
holds the models these tests name, and the environment its clients run in."""

from __future__ import annotations

from pathlib import Path

import httpx

import mlxd
from tests.e2e.cli.conftest import with_window
from tests.e2e.server.serverproc import ServerProcess, metric, server_env, wait_for
from tests.integration.chat.scripted import WEATHER_SCRIPT, make_scripted_checkpoint

KEY = "s3cret-key"
# The tree under test: children import it, not whatever mlxd the venv was installed from.
SRC = str(Path(mlxd.__file__).resolve().parents[1])
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def make_home(home: Path, tiny_chat_model: Path) -> Path:
    """An MLXD_HOME whose store holds tiny-long (a 64k window: --ignore-eos answers run for
    seconds), tiny-short (96 tokens) and scripted (thinks, says a little, calls get_weather)."""
    store = home / "mlxd" / "models"
    store.mkdir(parents=True)
    with_window(tiny_chat_model, store / "tiny-long", 1 << 16)
    with_window(tiny_chat_model, store / "tiny-short", 96)
    make_scripted_checkpoint(store / "scripted", WEATHER_SCRIPT)
    return home


def client_env(home: Path) -> dict[str, str]:
    """The environment of a server and of its CLI clients: no MLXD_SERVER or key set."""
    env = server_env(home, PYTHONPATH=SRC)
    env.pop("MLXD_SERVER", None)
    return env


def metrics(server: ServerProcess) -> str:
    auth = {"Authorization": f"Bearer {KEY}"}
    reply = httpx.get(server.url + "/metrics", headers=auth, timeout=10)
    reply.raise_for_status()
    return reply.text


def running(server: ServerProcess) -> float:
    """Requests the server is generating for now."""
    return metric(metrics(server), "mlxd_running_requests")


def cancelled(server: ServerProcess) -> float:
    """Requests the server's engine ended as cancelled, so far."""
    return metric(metrics(server), 'mlxd_requests_finished_total{reason="cancelled"}')


def wait_cancelled(server: ServerProcess, before: float) -> None:
    """Until the server has cancelled one more request and runs none."""
    wait_for(
        lambda: cancelled(server) == before + 1 and running(server) == 0,
        "the server to cancel the request",
    )
