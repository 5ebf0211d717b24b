"""`mlxd run` and `mlxd chat` open no socket: a sitecustomize in the child records every
bind/listen/connect on socket objects (and, at exit, any server or terminal-UI module that
got imported); a control run shows the recorder works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD

RECORDER = """
import os, socket
_LOG = os.environ["MLXD_TEST_SOCKET_LOG"]
def _wrap(name):
    original = getattr(socket.socket, name)
    def recorded(self, *args, **kwargs):
        with open(_LOG, "a") as log:
            log.write(f"{name} {args!r}\\n")
        return original(self, *args, **kwargs)
    setattr(socket.socket, name, recorded)
for _name in ("bind", "listen", "connect", "connect_ex"):
    _wrap(_name)

import atexit, sys
_HEAVY = ("fastapi", "uvicorn", "starlette", "prompt_toolkit", "rich")
def _heavy_modules():
    loaded = [m for m in sys.modules
              if m.split(".")[0] in _HEAVY or m.startswith("mlxd.server")]
    with open(os.environ["MLXD_TEST_MODULES_LOG"], "a") as log:
        log.write(" ".join(sorted(loaded)) + "\\n")
atexit.register(_heavy_modules)
"""


@pytest.fixture
def recorded_env(cli_env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "sockets.log"
    env = cli_env | {
        "PYTHONPATH": str(site),
        "MLXD_TEST_SOCKET_LOG": str(log),
        "MLXD_TEST_MODULES_LOG": str(tmp_path / "modules.log"),
    }
    return env, log


def test_recorder_sees_a_listening_socket(recorded_env: tuple[dict[str, str], Path]) -> None:
    env, log = recorded_env
    code = (
        "import socket, rich; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.close()"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
    assert "bind" in log.read_text() and "listen" in log.read_text()
    assert "rich" in Path(env["MLXD_TEST_MODULES_LOG"]).read_text().split()


def test_run_and_chat_open_no_socket(
    tiny_chat_model: Path, recorded_env: tuple[dict[str, str], Path]
) -> None:
    env, log = recorded_env
    run = subprocess.run(
        [*MLXD, "run", str(tiny_chat_model), "hello", "--max-tokens", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    chat = subprocess.run(
        [*MLXD, "chat", str(tiny_chat_model), "--max-tokens", "3"],
        input="hello\n/stats\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
    assert chat.returncode == 0 and "session: 1 answer," in chat.stdout, chat.stderr
    assert not log.exists(), log.read_text()
    # the server's and the line editor's imports stay off this path (start-up time)
    heavy = Path(env["MLXD_TEST_MODULES_LOG"]).read_text().splitlines()
    assert heavy == ["", ""], heavy
