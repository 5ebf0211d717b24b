"""`mlxd serve` flags, and the CLI start-up path stays light (no fastapi/uvicorn/mlx)."""

from __future__ import annotations

import subprocess
import sys

from mlxd.cli.main import build_parser


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
