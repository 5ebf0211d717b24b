"""`mlxd serve` flags, and the CLI start-up path stays light (no fastapi/uvicorn/mlx)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlxd.cli.main import build_parser
from mlxd.errors import InvalidRequest
from mlxd.server.settings import ServerSettings


def test_importing_the_serve_command_is_light() -> None:
    code = (
        "import sys, mlxd.cli.serve, mlxd.cli.main; mlxd.cli.main.build_parser(); "
        "heavy = [m for m in ('fastapi', 'uvicorn', 'starlette', 'mlx.core', 'mlxd.server.app') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_serve_flags_parse() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model",
            "m",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--api-key",
            "k",
            "--allowed-origins",
            "http://a",
            "http://b",
            "--max-batch",
            "4",
            "--max-queue",
            "8",
            "--max-tokens-ceiling",
            "100",
            "--drain-seconds",
            "2.5",
            "--trust-remote-code",
        ]
    )
    assert args.model == "m" and args.port == 0 and args.allowed_origins == ["http://a", "http://b"]
    assert (args.max_batch, args.max_queue, args.max_tokens_ceiling) == (4, 8, 100)
    assert args.drain_seconds == 2.5 and args.trust_remote_code and callable(args.func)


def test_settings_from_env_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_API_KEY", "envkey")
    monkeypatch.setenv("MLXD_PORT", "9001")
    s = ServerSettings.from_config(port=None, host="::1")
    assert (s.api_key, s.port, s.host, s.loopback) == ("envkey", 9001, "::1", True)
    assert ServerSettings.from_config(api_key="flag").api_key == "flag"
    monkeypatch.setenv("MLXD_PORT", "eighty")
    with pytest.raises(InvalidRequest):
        ServerSettings.from_config()
    monkeypatch.setenv("MLXD_PORT", "8080")
    with pytest.raises(InvalidRequest):
        ServerSettings.from_config(port=70000)


def test_web_page_setting_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ServerSettings.from_config().web
    assert build_parser().parse_args(["serve", "--no-web"]).no_web
    assert not build_parser().parse_args(["serve"]).no_web
    monkeypatch.setenv("MLXD_WEB", "0")
    assert not ServerSettings.from_config().web
