"""STYLE.md habit 21: importing is free. The layers above the backend load neither mlx nor MKL
when imported, and the engine sees the backend through its contract and its factory only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.arch.test_arch_layers import SRC

LAYERS = ("mlxd.engine", "mlxd.store", "mlxd.chat", "mlxd.config", "mlxd.types")
ENGINE_SEES = {"mlxd.backend.api", "mlxd.backend.factory"}

# argv: "prepare" or "-", then the modules to import; prints what got loaded.
PROBE = """
import json, sys
if sys.argv[1] == "prepare":
    from mlxd.backend.native import prepare_mlx
    prepare_mlx()
for name in sys.argv[2:]:
    __import__(name)
with open("/proc/self/maps", encoding="utf-8") as maps:
    mkl = sorted({line.split()[-1] for line in maps if "libmkl" in line})
mlx = sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm", "mlx_vlm"))
print(json.dumps({"mlx": mlx, "mkl": mkl, "hooks": [type(f).__name__ for f in sys.meta_path]}))
"""


def probe(first: str, *modules: str) -> dict[str, list[str]]:
    argv = [sys.executable, "-c", PROBE, first, *modules]
    loaded: dict[str, list[str]] = json.loads(
        subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    )
    return loaded


def test_importing_the_layers_loads_neither_mlx_nor_mkl() -> None:
    loaded = probe("-", *LAYERS)
    assert loaded["mlx"] == [] and loaded["mkl"] == []
    assert "_Finder" not in loaded["hooks"]  # lazy_transformers' hook: installed with a backend


def test_preparing_mlx_loads_mkl_and_the_hook() -> None:
    """What building a backend does, and proof that the probe above sees MKL when it is there."""
    loaded = probe("prepare")
    assert "_Finder" in loaded["hooks"] and loaded["mlx"] == []
    wanted = os.environ.get("MLXD_BLAS", "").strip().lower() != "reference"
    installed = (Path(sys.prefix) / "lib" / "libmkl_rt.so.3").is_file()
    assert bool(loaded["mkl"]) == (wanted and installed and sys.platform == "linux")


def backend_modules(path: Path) -> set[str]:
    """The mlxd.backend modules `path` imports (`from mlxd.backend import x` names x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "mlxd.backend":
            found.update(f"mlxd.backend.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {m for m in found if m.startswith("mlxd.backend")}


def test_the_engine_imports_the_backend_contract_and_factory_only() -> None:
    """Lazy and TYPE_CHECKING imports count too."""
    seen = {m for path in (SRC / "engine").rglob("*.py") for m in backend_modules(path)}
    assert seen <= ENGINE_SEES, sorted(seen - ENGINE_SEES)
