"""`mlxd import` through the installed console script: output, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import gguf_lying_array, gguf_nested_arrays

MLXD = str(Path(sys.executable).parent / "mlxd")  # the console script pip installed


def mlxd(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MLXD, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_importer_cli_json_then_listed(cli_gguf: Path, import_env: dict[str, str]) -> None:
    done = mlxd("import", str(cli_gguf), "--json", env=import_env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["name"] == "tiny-llama-test"
    assert result["dtype"] == "float32" and result["parameters"] > 0
    assert Path(result["path"], "model.safetensors").stat().st_size == result["bytes"]
    listed = mlxd("list", "--json", env=import_env)
    assert listed.returncode == 0, listed.stderr
    entries = {e["id"]: e for e in json.loads(listed.stdout)}
    assert entries["tiny-llama-test"]["source"] == "store"
    assert entries["tiny-llama-test"]["status"] == "ok"


def test_importer_cli_human_output_and_dtype(cli_gguf: Path, import_env: dict[str, str]) -> None:
    done = mlxd("import", str(cli_gguf), "--name", "tiny16", "--dtype", "float16", env=import_env)
    assert done.returncode == 0, done.stderr
    line = one_line(done.stdout)
    assert line.startswith("imported tiny.gguf as tiny16:") and "float16" in line
    config = json.loads(Path(line.rsplit("-> ", 1)[1], "config.json").read_text())
    assert config["torch_dtype"] == "float16"


@pytest.mark.parametrize(
    ("make", "code", "needle"),
    [
        (lambda d: d / "absent.gguf", 3, "no such file"),
        (lambda d: _write(d / "notes.gguf", b"hello world\n"), 4, "not a GGUF file"),
        (lambda d: _write(d / "empty.gguf", b""), 4, "not a GGUF file"),
        (lambda d: _write(d / "cut.gguf", b"GGUF\x03\x00\x00\x00\x01"), 4, "truncated or corrupt"),
        (lambda d: gguf_lying_array(d / "lying.gguf"), 4, "array items cannot fit"),
        (lambda d: gguf_nested_arrays(d / "deep.gguf"), 4, "nested deeper than"),
    ],
)
def test_importer_cli_bad_files(
    make, code: int, needle: str, tmp_path: Path, import_env: dict[str, str]
) -> None:
    path = make(tmp_path)
    done = mlxd("import", str(path), env=import_env)
    assert done.returncode == code
    assert needle in one_line(done.stderr) and done.stdout == ""
    as_json = mlxd("import", str(path), "--json", env=import_env)
    assert as_json.returncode == code
    error = json.loads(one_line(as_json.stderr))["error"]
    assert needle in error["message"] and error["code"]
    assert not Path(import_env["MLXD_HOME"], "models").exists() or not any(
        Path(import_env["MLXD_HOME"], "models").iterdir()
    )


def test_importer_cli_name_errors(cli_gguf: Path, import_env: dict[str, str]) -> None:
    bad = mlxd("import", str(cli_gguf), "--name", "../up", env=import_env)
    assert bad.returncode == 2 and "invalid model name" in one_line(bad.stderr)
    assert mlxd("import", str(cli_gguf), "--name", "t", env=import_env).returncode == 0
    again = mlxd("import", str(cli_gguf), "--name", "t", "--json", env=import_env)
    assert again.returncode == 2
    assert json.loads(one_line(again.stderr))["error"]["param"] == "name"
    forced = mlxd("import", str(cli_gguf), "--name", "t", "--force", env=import_env)
    assert forced.returncode == 0, forced.stderr


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
