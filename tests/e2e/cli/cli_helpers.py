"""Run the real `mlxd` entry point in a subprocess and check its output shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlxd

MLXD = [sys.executable, "-m", "mlxd.cli.main"]
# A child's PYTHONPATH: the mlxd these tests import (a worktree's, not the venv's install).
SRC = str(Path(mlxd.__file__).resolve().parents[1])


def run_mlxd(
    *args: str, env: dict[str, str], input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MLXD, *args],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def one_json_line(text: str) -> dict:
    """The text is exactly one line holding one JSON object."""
    lines = text.splitlines()
    assert len(lines) == 1, text
    body = json.loads(lines[0])
    assert isinstance(body, dict)
    return body
