"""`mlxd run --server URL` against a real OpenAI-compatible server that is not mlxd:
mlx-lm's own `mlx_lm.server` on the tiny checkpoint. It answers GET /v1/models/NAME with its
whole list and an unknown model with a plain 404; mlxd says the model is not served there
and names the ones the server lists, and a listed model answers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import SRC, one_json_line, run_mlxd
from tests.e2e.cli.serve_helper import _wait_ready, free_port


@pytest.fixture(scope="module")
def mlx_lm_server(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    home = tmp_path_factory.mktemp("mlx-lm-home")
    (home / "hf" / "hub").mkdir(parents=True)  # mlx_lm.server scans it for /v1/models
    env = dict(os.environ, HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1", PYTHONPATH=SRC)
    env.update(MLXD_HOME=str(home / "mlxd"))
    env.pop("MLXD_SERVER", None)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm", "server", "--model", str(tiny_chat_model),
         "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url + "/v1/models", timeout=120)
        yield url, env
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_unknown_model_is_named_with_the_servers_list(
    mlx_lm_server: tuple[str, dict[str, str]], tiny_chat_model: Path
) -> None:
    url, env = mlx_lm_server
    served = str(tiny_chat_model.resolve())
    for args in (["-m", "nosuch", "hi"], ["nosuch", "hi", "there"]):
        proc = run_mlxd("run", "--server", url, *args, env=env)
        [line] = proc.stderr.splitlines()
        assert proc.returncode == 3, line
        assert f"the server at {url} does not serve a model named 'nosuch'" in line
        assert f"it lists: {served}" in line and "mlxd server" not in line
    default = run_mlxd("run", "--server", url, "hi", env=env)  # one word: the prompt
    assert default.returncode == 3
    assert f"has no default model: name one; it lists: {served}" in default.stderr
    body = one_json_line(
        run_mlxd(
            "run", "--server", url, served, "hi", "--max-tokens", "2", "--json", env=env
        ).stdout
    )
    assert body["model"] == served and body["usage"]["completion_tokens"] == 2
