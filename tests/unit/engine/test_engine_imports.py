"""Layering: the engine never imports the front doors; only backend/ imports mlx."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mlxd

SRC = Path(mlxd.__file__).parent
FORBIDDEN = ("mlxd.server", "mlxd.cli", "fastapi", "starlette", "uvicorn", "click", "typer")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_engine_sources_import_no_front_door_and_no_mlx() -> None:
    for path in sorted((SRC / "engine").rglob("*.py")):
        for name in imported_modules(path):
            assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"
            assert not name.startswith(("mlx.", "mlx_lm")) and name != "mlx", path.name


def test_importing_the_engine_loads_no_front_door_nor_mlx() -> None:
    code = (
        "import sys, mlxd.engine\n"
        f"bad = [m for m in sys.modules if m.startswith({FORBIDDEN!r}) or m in ('mlx', 'mlx_lm')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
