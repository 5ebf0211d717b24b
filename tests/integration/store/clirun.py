"""Run the real `mlxd` entry point in a subprocess with an isolated home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def error(self) -> dict[str, Any]:
        """The single JSON error line printed on stderr with --json."""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, self.stderr
        return json.loads(lines[0])["error"]


def cli_env(home: Path, endpoint: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MLXD_"))}
    env.update(HF_HOME=str(home / "hf"), MLXD_HOME=str(home / "mlxd"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1")  # fmt: skip
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    else:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mlxd.cli.main", *args]


def mlxd(home: Path, *args: str, endpoint: str | None = None, stdin: str = "") -> Result:
    proc = subprocess.run(
        command(*args), env=cli_env(home, endpoint), input=stdin, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)
