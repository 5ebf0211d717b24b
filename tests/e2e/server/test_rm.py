"""`mlxd rm` of a model a running server has loaded: the server stops serving it at once (404,
like any model the store does not know) instead of answering from the weights it still holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.server.serverproc import launch, server_env


def test_removed_model_is_no_longer_served(tiny_chat_model: Path, tmp_path: Path) -> None:
    store = tmp_path / "mlxd" / "models"
    shutil.copytree(tiny_chat_model, store / "alpha")
    env = server_env(tmp_path)
    srv = launch(["--model", str(tiny_chat_model)], env)
    try:
        url = srv.base_url
        body = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(url + "/chat/completions", json=body, timeout=120).status_code == 200
        rm = subprocess.run(
            [sys.executable, "-m", "mlxd.cli.main", "rm", "alpha", "--yes"],
            env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert rm.returncode == 0, rm.stderr
        r = httpx.post(url + "/chat/completions", json=body, timeout=120)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "model_not_found"
        assert httpx.get(url + "/models/alpha", timeout=30).status_code == 404
        ids = [m["id"] for m in httpx.get(url + "/models", timeout=30).json()["data"]]
        assert "alpha" not in ids
        default = {**body, "model": "default"}
        assert httpx.post(url + "/chat/completions", json=default, timeout=120).status_code == 200
    finally:
        srv.stop()
