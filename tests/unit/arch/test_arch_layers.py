"""The dependency direction of STYLE.md, checked on the source: cli, server -> chat, engine,
store -> backend -> mlx. Nothing imports cli or server; only backend imports mlx / mlx_lm."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "mlxd"

FORBIDDEN: dict[str, set[str]] = {
    "engine": {
        "mlxd.server",
        "mlxd.cli",
        "fastapi",
        "uvicorn",
        "starlette",
        "click",
        "typer",
        "prompt_toolkit",
        "rich",
    },
    "chat": {"mlxd.server", "mlxd.cli", "fastapi", "uvicorn", "mlx", "prompt_toolkit"},
    "store": {"mlxd.server", "mlxd.cli", "mlxd.engine", "mlxd.chat", "fastapi", "uvicorn"},
    "backend": {"mlxd.server", "mlxd.cli", "mlxd.engine", "mlxd.chat", "fastapi"},
}
MLX_ALLOWED = {"backend", "store"}  # the store's GGUF import writes MLX arrays
# The chat layer may reuse mlx_lm's pure-Python helpers (tool parsers), never mlx itself.
MLX_LM_ALLOWED = MLX_ALLOWED | {"chat"}
ALWAYS_FORBIDDEN = {"mlxd.cli", "mlxd.server"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def matches(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_files(layer: str) -> list[Path]:
    return sorted((SRC / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_does_not_import_forbidden(layer: str) -> None:
    bad = {
        f"{f.relative_to(SRC)} imports {m}"
        for f in layer_files(layer)
        for m in imported_modules(f)
        if matches(m, FORBIDDEN[layer])
    }
    assert not bad, sorted(bad)


def test_only_backend_and_store_import_mlx() -> None:
    bad = set()
    for f in SRC.rglob("*.py"):
        layer = f.relative_to(SRC).parts[0]
        for m in imported_modules(f):
            if matches(m, {"mlx"}) and layer not in MLX_ALLOWED:
                bad.add(f"{f.relative_to(SRC)} imports {m}")
            if matches(m, {"mlx_lm"}) and layer not in MLX_LM_ALLOWED:
                bad.add(f"{f.relative_to(SRC)} imports {m}")
    assert not bad, sorted(bad)


def test_nothing_imports_cli_or_server_except_themselves() -> None:
    bad = set()
    for f in SRC.rglob("*.py"):
        layer = f.relative_to(SRC).parts[0]
        if layer in ("cli", "server"):
            continue
        for m in imported_modules(f):
            if matches(m, ALWAYS_FORBIDDEN):
                bad.add(f"{f.relative_to(SRC)} imports {m}")
    assert not bad, sorted(bad)


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import mlx.core as mx\nfrom fastapi import FastAPI\n")
    assert imported_modules(f) == {"mlx.core", "fastapi"}
    assert matches("mlx.core", {"mlx"}) and not matches("mlxd.x", {"mlx"})
