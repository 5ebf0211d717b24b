"""The dependency map of docs/ARCHITECTURE.md, enforced on the source.

The map is read from the doc itself (the code blocks after `<!-- arch: packages -->` and
`<!-- arch: libraries -->`), so the doc and this test cannot disagree: a package may import
only the mlxd packages its row lists, every edge points down the rows, and a third-party
library may be imported only by the packages its row names (the standard library is free).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "mlxd"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BASE = "base"  # the top-level modules: config.py, types.py, errors.py, ...
ARROW = "──▶"
BACK_ARROW = "◀──"


def doc_block(marker: str, text: str | None = None) -> list[str]:
    """The lines of the first fenced code block after `<!-- arch: {marker} -->` in the doc."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    found = re.search(rf"<!-- arch: {marker} -->\s*```[a-z]*\n(.*?)\n```", text, re.S)
    assert found, f"docs/ARCHITECTURE.md has no code block after <!-- arch: {marker} -->"
    return [line for line in found.group(1).splitlines() if line.strip()]


def _names(text: str) -> list[str]:
    """The names on one side of an arrow; parenthesized notes are prose, not names."""
    return re.sub(r"\([^)]*\)", " ", text).split()


def package_rows(lines: list[str]) -> dict[str, list[str]]:
    """`package ──▶ allowed ...` rows, top layer first (dicts keep the doc's order)."""
    rows: dict[str, list[str]] = {}
    for line in lines:
        package, arrow, allowed = line.partition(ARROW)
        assert arrow, f"not a `package {ARROW} packages` row: {line!r}"
        rows[package.strip()] = _names(allowed)
    return rows


def library_rows(lines: list[str]) -> dict[str, set[str]]:
    """`library ... ◀── package ...` rows: library -> the packages that may import it."""
    allowed: dict[str, set[str]] = {}
    for line in lines:
        libraries, arrow, packages = line.partition(BACK_ARROW)
        assert arrow, f"not a `library {BACK_ARROW} packages` row: {line!r}"
        for library in _names(libraries):
            allowed[library] = set(_names(packages))
    return allowed


def package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else BASE


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module `path` imports, lazy and TYPE_CHECKING imports too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = ("mlxd", *path.relative_to(SRC).parent.parts)
                parts = [
                    *base[: len(base) - node.level + 1],
                    *([node.module] if node.module else []),
                ]
                names.add(".".join(parts))
            elif node.module:
                names.add(node.module)
    return names


def target_package(module: str) -> str | None:
    """The mlxd package a module name belongs to (None for third-party/stdlib)."""
    parts = module.split(".")
    if parts[0] != "mlxd":
        return None
    if len(parts) == 1 or (SRC / f"{parts[1]}.py").exists():
        return BASE
    return parts[1]


def violations(
    files: list[Path], rows: dict[str, list[str]], libs: dict[str, set[str]]
) -> list[str]:
    bad: list[str] = []
    for f in files:
        package = package_of(f)
        for module in sorted(imported_modules(f)):
            top = module.split(".")[0]
            target = target_package(module)
            where = f"{f.relative_to(SRC)} imports {module}"
            if target is not None:
                if target != package and target not in rows.get(package, []):
                    bad.append(f"{where}: {package} {ARROW} {target} is not in the map")
            elif top not in sys.stdlib_module_names and top != "__future__":
                if package not in libs.get(top, set()):
                    bad.append(f"{where}: {top} {BACK_ARROW} {package} is not in the map")
    return bad


ROWS = package_rows(doc_block("packages"))
LIBS = library_rows(doc_block("libraries"))
FILES = sorted(SRC.rglob("*.py"))
API_FOLDERS = {
    SRC / "server" / api for api in ("openai", "anthropic", "responses", "ollama", "embeddings")
}


@pytest.mark.parametrize("package", sorted({package_of(f) for f in FILES}))
def test_imports_follow_the_map(package: str) -> None:
    files = [f for f in FILES if package_of(f) == package]
    bad = violations(files, ROWS, LIBS)
    assert not bad, "\n".join(bad)


def test_the_map_points_down() -> None:
    """Every edge goes to a later row: the rows are the layers, top first."""
    order = list(ROWS)
    assert order[-1] == BASE
    for package, allowed in ROWS.items():
        for target in allowed:
            assert target in ROWS, f"{package} {ARROW} {target}: no row for {target}"
            assert order.index(target) > order.index(package), f"{package} {ARROW} {target}"


def test_the_map_names_every_package_and_base_module() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert set(ROWS) == packages | {BASE}
    listed = {n for line in doc_block("packages") if line.startswith(BASE) for n in
              re.findall(r"[a-z_]+\.py", line)}  # fmt: skip
    assert listed == {p.name for p in SRC.glob("*.py")} - {"__init__.py"}


def test_nothing_imports_cli_or_server() -> None:
    """STYLE.md's rule, as the map states it: only cli imports server, nobody imports cli."""
    importers = {p for p, allowed in ROWS.items() for t in allowed if t in ("cli", "server")}
    assert importers <= {"cli"}


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import mlx.core as mx\nfrom fastapi import FastAPI\n")
    assert imported_modules(f) == {"mlx.core", "fastapi"}
    assert target_package("mlxd.engine.core") == "engine"
    assert target_package("mlxd.config") == target_package("mlxd") == BASE
    assert target_package("mlx.core") is None


def test_the_checker_finds_an_upward_import_and_an_undeclared_library() -> None:
    text = (
        "<!-- arch: packages -->\n```text\nengine ──▶ base\nbase ──▶ (config.py)\n```\n"
        "<!-- arch: libraries -->\n```text\nmlx ◀── backend (only)\n```\n"
    )
    rows = package_rows(doc_block("packages", text))
    libs = library_rows(doc_block("libraries", text))
    assert rows == {"engine": [BASE], BASE: []} and libs == {"mlx": {"backend"}}
    core = SRC / "engine" / "core.py"  # imports mlxd.backend and the stdlib
    assert any("engine ──▶ backend" in v for v in violations([core], rows, libs))
    batch = SRC / "backend" / "batch.py"  # imports mlx and mlx_lm
    found = violations([batch], {"backend": [BASE], BASE: []}, libs)
    assert any("mlx_lm ◀── backend" in v for v in found)
    assert not any(v.endswith("mlx ◀── backend is not in the map") for v in found)


def test_names_are_unique_across_the_tree() -> None:
    """STYLE.md habit 18: no two modules share a file name, no two classes a name.

    One exception: the per-API folders of server/ repeat one shape (routes, schemas, inputs,
    wire), as vLLM's entrypoints do, so those role names repeat among them and only there."""
    modules = [f.name for f in FILES if f.name != "__init__.py" and f.parent not in API_FOLDERS]
    modules += sorted({f.name for f in FILES if f.parent in API_FOLDERS} - {"__init__.py"})
    assert sorted(m for m in set(modules) if modules.count(m) > 1) == []
    classes = [
        f"{node.name} ({f.relative_to(SRC)})"
        for f in FILES
        for node in ast.parse(f.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef)
    ]
    names = [c.split(" ")[0] for c in classes]
    assert sorted(c for c in classes if names.count(c.split(" ")[0]) > 1) == []
