"""`mlxd ps` against a real server holding two models: the pinned default with its draft, and
a store model a request loaded (TTL running); requests running on it while `ps` asks; the key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mlxd.errors import AuthError
from tests.checkpoints import make_checkpoint
from tests.e2e.server.serverproc import ServerProcess, launch, server_env

KEY = "ps-key"


@pytest.fixture(scope="module")
def ps_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("ps-home")
    store = home / "mlxd" / "models"
    make_checkpoint(store / "alpha", "chat", seed=31)
    make_checkpoint(store / "alpha-draft", "small", seed=32)
    make_checkpoint(store / "gamma", "chat", seed=33)
    config = json.loads((store / "gamma" / "config.json").read_text())
    config["max_position_embeddings"] = 65536  # one request can decode for a long time
    (store / "gamma" / "config.json").write_text(json.dumps(config))
    return home


@pytest.fixture(scope="module")
def server(ps_home: Path) -> Iterator[ServerProcess]:
    args = ["--model", "alpha", "--draft-model", "alpha-draft", "--model-ttl", "600",
            "--api-key", KEY]  # fmt: skip
    srv = launch(args, server_env(ps_home))
    yield srv
    srv.stop()


def ps(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlxd.cli.main", "ps", "--server", server.url, *args]
    return subprocess.run(command, env=server.env, capture_output=True, text=True, timeout=120)


def test_ps_shows_both_models_and_a_running_request(server: ServerProcess, ps_home: Path) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "gamma", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 30000, "ignore_eos": True, "stream": True}  # fmt: skip
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body,
                      headers=headers, timeout=120) as stream:  # fmt: skip
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        during = ps(server, "--api-key", KEY, "--json")
    assert during.returncode == 0, during.stderr
    models = {m["name"]: m for m in json.loads(during.stdout)["models"]}
    assert list(models) == ["alpha", "gamma"]
    alpha, gamma = models["alpha"], models["gamma"]
    assert (alpha["default"], alpha["pinned"], alpha["draft"]) == (True, True, "alpha-draft")
    assert alpha["unloads_in_seconds"] is None and alpha["ttl_seconds"] == 600
    assert (gamma["running"], gamma["queued"], gamma["draft"]) == (1, 0, None)
    assert gamma["unloads_in_seconds"] is None  # not while a request runs on it
    assert alpha["kind"] == gamma["kind"] == "generation"
    store = ps_home / "mlxd" / "models"
    weights = (store / "gamma" / "model.safetensors").stat().st_size
    assert 0.9 * weights < gamma["weight_bytes"] <= weights  # the file less its header
    draft = (store / "alpha-draft" / "model.safetensors").stat().st_size
    assert alpha["weight_bytes"] > draft

    after = ps(server, "--api-key", KEY, "--json")  # the stream was closed: gamma is idle
    idle = {m["name"]: m for m in json.loads(after.stdout)["models"]}["gamma"]
    assert idle["running"] == 0 and 0 < idle["unloads_in_seconds"] <= 600
    cache = json.loads(after.stdout)["prefix_cache"]
    assert set(cache) == {"bytes", "kv_bytes", "entries"} and cache["bytes"] >= cache["kv_bytes"]


def test_ps_table_and_key(server: ServerProcess) -> None:
    table = ps(server, "--api-key", KEY)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "MEMORY", "DRAFT", "RUNNING", "QUEUED", "UNLOADS"]
    assert lines[1].startswith("alpha (default)") and lines[1].endswith("pinned")
    assert "alpha-draft" in lines[1] and lines[2].startswith("gamma")
    assert lines[-1].startswith("prefix cache: ")
    refused = ps(server, "--json")
    assert refused.returncode == AuthError.exit_code
    assert "API key" in json.loads(refused.stderr)["error"]["message"]
    open_health = httpx.get(server.url + "/health", timeout=30)
    assert open_health.status_code == 200  # /health stays open; /health/models does not
    assert httpx.get(server.url + "/health/models", timeout=30).status_code == 401


def test_ps_without_a_server_is_one_line(tmp_path: Path) -> None:
    import socket

    from mlxd.errors import EngineUnavailable

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "mlxd.cli.main", "ps", "--server", f"127.0.0.1:{port}"]
    proc = subprocess.run(command, env=server_env(tmp_path), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == EngineUnavailable.exit_code
    assert proc.stderr.count("\n") == 1 and "mlxd serve" in proc.stderr
